"""Which hidepid option a /proc mount has, read from /proc/self/mounts text."""

from __future__ import annotations

from pathlib import Path

from placewatch.worker.doctor.processes import hidepid_option

# /proc/self/mounts lines as Linux 5.8 and later write them (hidepid=invisible is 2's new name).
MOUNTS = """\
overlay / overlay rw,relatime,lowerdir=/var/lib/docker/overlay2/l/A:/var/lib/docker/overlay2/l/B 0 0
proc /proc proc rw,nosuid,nodev,noexec,relatime,hidepid=invisible 0 0
tmpfs /dev tmpfs rw,nosuid,size=65536k,mode=755 0 0
proc /host/proc proc rw,nosuid,nodev,noexec,relatime 0 0
"""


def test_hidepid_invisible_on_proc_is_said() -> None:
    assert hidepid_option(MOUNTS, Path("/proc")) == "hidepid=invisible"


def test_a_numbered_hidepid_is_said_as_mounted() -> None:
    mounts = "proc /proc proc rw,relatime,hidepid=2,gid=27 0 0\n"
    assert hidepid_option(mounts, Path("/proc")) == "hidepid=2"


def test_hidepid_that_hides_nothing_is_none() -> None:
    for option in ("hidepid=0", "hidepid=off"):
        assert hidepid_option(f"proc /proc proc rw,{option} 0 0\n", Path("/proc")) is None


def test_only_the_proc_mount_asked_about_counts() -> None:
    assert hidepid_option(MOUNTS, Path("/host/proc")) is None
    assert hidepid_option("tmpfs /proc tmpfs rw,hidepid=2 0 0\n", Path("/proc")) is None
    assert hidepid_option("", Path("/proc")) is None
