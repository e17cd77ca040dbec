"""Where a discovered engine's output is found, against a /proc laid out by the test: each
fd a symlink as the kernel shows it (a path, `pipe:[N]`, `socket:[N]`, /dev/null)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from placewatch.worker.engines import Launch, read_launch
from placewatch.worker.engines.evidence.source import Deleted, HeldLog, JournalLog
from placewatch.worker.shards.discover.log_path import find_log, log_source, piped_output

from tests.support.discovery import MODEL, SERVER

PID = 4242


def found(launch: Launch, env: dict[str, str], pid: int, proc: Path) -> str | None:
    """The path of the log find_log finds, whose descriptor it names."""
    held = find_log(launch, env, pid, proc)
    if held is None:
        return None
    assert isinstance(held, HeldLog)
    assert (held.pid, held.proc) == (pid, str(proc))
    assert os.readlink(proc / str(pid) / "fd" / str(held.fd)) == held.path
    return held.path


def launch(*cmdline: str) -> Launch:
    found = read_launch(list(cmdline))
    assert found is not None
    return found


def proc_with(root: Path, fds: dict[int, str], cwd: Path | None = None) -> Path:
    """A /proc whose process PID has these descriptors (fd -> link target) and folder."""
    (root / str(PID) / "fd").mkdir(parents=True)
    for fd, target in fds.items():
        os.symlink(target, root / str(PID) / "fd" / str(fd))
    os.symlink(cwd or root, root / str(PID) / "cwd")
    return root


def a_file(tmp_path: Path, name: str) -> str:
    path = tmp_path / name
    path.write_text("")
    return str(path)


def test_a_llama_server_writing_to_a_file_gives_that_file(tmp_path: Path) -> None:
    log = a_file(tmp_path, "llama.log")
    proc = proc_with(tmp_path / "proc", {0: "/dev/null", 1: log, 2: log})
    assert found(launch(SERVER, "-m", MODEL), {}, PID, proc) == log


@pytest.mark.parametrize(
    ("cmdline", "stdout", "stderr", "chosen"),
    [
        ([SERVER], "out.log", "err.log", "err.log"),  # llama.cpp logs to stderr
        ([SERVER], "out.log", "pipe:[81234]", "out.log"),
        (["ollama", "runner", "--model", "m"], "serve.log", "pipe:[81234]", "serve.log"),
        (["vllm", "serve", "m"], "out.log", "err.log", "out.log"),  # vLLM logs to stdout
        (["vllm", "serve", "m"], "socket:[99]", "err.log", "err.log"),
    ],
)
def test_each_engine_s_own_output_comes_first(
    tmp_path: Path, cmdline: list[str], stdout: str, stderr: str, chosen: str
) -> None:
    links = {
        fd: a_file(tmp_path, name) if name.endswith(".log") else name
        for fd, name in ((1, stdout), (2, stderr))
    }
    proc = proc_with(tmp_path / "proc", links)
    assert found(launch(*cmdline), {}, PID, proc) == str(tmp_path / chosen)


@pytest.mark.parametrize(
    "target", ["pipe:[81234]", "socket:[5521]", "/dev/null", "/dev/pts/3", "anon_inode:[eventfd]"]
)
def test_a_pipe_a_socket_a_terminal_or_dev_null_is_no_log(tmp_path: Path, target: str) -> None:
    proc = proc_with(tmp_path / "proc", {1: target, 2: target})
    assert found(launch(SERVER), {}, PID, proc) is None


def test_a_file_deleted_since_it_was_opened_stays_its_log_and_is_never_opened(
    tmp_path: Path,
) -> None:
    # The kernel's link names the held file with " (deleted)" after its path; here a file of
    # that name stands for the inode the descriptor still holds.
    held = a_file(tmp_path, "llama.log (deleted)")
    proc = proc_with(tmp_path / "proc", {2: held})
    kept = find_log(launch(SERVER), {}, PID, proc)
    assert kept == HeldLog(str(tmp_path / "llama.log"), PID, 2, str(proc))
    with pytest.raises(Deleted):
        kept.look()


def test_a_deleted_file_comes_after_a_live_one(tmp_path: Path) -> None:
    held = a_file(tmp_path, "err.log (deleted)")
    proc = proc_with(tmp_path / "proc", {1: a_file(tmp_path, "out.log"), 2: held})
    assert found(launch(SERVER), {}, PID, proc) == str(tmp_path / "out.log")


def test_a_deleted_name_that_is_no_file_is_no_log(tmp_path: Path) -> None:
    proc = proc_with(tmp_path / "proc", {2: f"{tmp_path}/gone.log (deleted)"})
    assert find_log(launch(SERVER), {}, PID, proc) is None


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (["--log-file", "logs/llama.log"], {}),
        (["--log-file=logs/llama.log"], {}),
        ([], {"LLAMA_ARG_LOG_FILE": "logs/llama.log"}),
    ],
)
def test_llama_cpp_s_log_file_is_found_in_its_working_folder_when_held_open(
    tmp_path: Path, args: list[str], env: dict[str, str]
) -> None:
    work = tmp_path / "work"
    (work / "logs").mkdir(parents=True)
    log = a_file(work / "logs", "llama.log")
    proc = proc_with(tmp_path / "proc", {1: "pipe:[1]", 2: "pipe:[1]", 4: log}, cwd=work)
    assert found(launch(SERVER, *args), env, PID, proc) == log


def test_a_stderr_file_comes_before_the_log_file_which_misses_what_llama_cpp_prints_there(
    tmp_path: Path,
) -> None:
    err, log = a_file(tmp_path, "err.log"), a_file(tmp_path, "llama.log")
    proc = proc_with(tmp_path / "proc", {1: "/dev/null", 2: err, 4: log})
    assert found(launch(SERVER, "--log-file", log), {}, PID, proc) == err


def test_a_log_file_named_on_the_command_line_but_not_held_open_is_not_followed(
    tmp_path: Path,
) -> None:
    # Anyone may start a process called llama-server naming any file: root must not follow it.
    secret = a_file(tmp_path, "not-a-log")
    proc = proc_with(tmp_path / "proc", {1: "pipe:[1]", 2: "pipe:[1]"})
    assert found(launch(SERVER, "--log-file", secret), {}, PID, proc) is None


def test_a_process_whose_descriptors_may_not_be_read_has_no_log(tmp_path: Path) -> None:
    assert found(launch(SERVER), {}, PID, tmp_path / "empty-proc") is None


def with_cgroup(proc: Path, text: str) -> Path:
    (proc / str(PID) / "cgroup").write_text(text)
    return proc


def test_a_service_writing_to_journald_gives_its_journal(tmp_path: Path) -> None:
    proc = proc_with(tmp_path / "proc", {1: "socket:[4711]", 2: "socket:[4711]"})
    with_cgroup(proc, "0::/system.slice/ollama.service\n")
    found_log = find_log(launch("ollama", "serve"), {}, PID, proc)
    assert isinstance(found_log, JournalLog)
    assert (found_log.unit, found_log.pid, found_log.path) == (
        "ollama.service",
        PID,
        "journal:ollama.service",
    )


@pytest.mark.parametrize(
    ("fds", "cgroup"),
    [
        ({1: "pipe:[1]", 2: "pipe:[1]"}, "0::/system.slice/ollama.service\n"),  # a supervisor
        ({1: "socket:[1]", 2: "socket:[1]"}, "0::/user.slice/user-1000.slice/session-2.scope\n"),
        (
            {1: "socket:[1]", 2: "socket:[1]"},
            "0::/user.slice/user-1000.slice/user@1000.service/app.slice/ollama.service\n",
        ),
    ],
)
def test_output_no_system_journal_keeps_gives_no_log(
    tmp_path: Path, fds: dict[int, str], cgroup: str
) -> None:
    proc = with_cgroup(proc_with(tmp_path / "proc", fds), cgroup)
    assert find_log(launch("ollama", "serve"), {}, PID, proc) is None


def test_a_file_comes_before_the_journal(tmp_path: Path) -> None:
    log = a_file(tmp_path, "llama.log")
    proc = proc_with(tmp_path / "proc", {1: "socket:[4711]", 2: log})
    with_cgroup(proc, "0::/system.slice/llama.service\n")
    assert found(launch(SERVER, "-m", MODEL), {}, PID, proc) == log


def test_a_placed_journal_is_read_only_as_its_process_s_own_unit(tmp_path: Path) -> None:
    proc = with_cgroup(proc_with(tmp_path / "proc", {}), "0::/system.slice/ollama.service\n")
    own = log_source("journal:ollama.service", None, PID, proc)
    assert isinstance(own, JournalLog) and own.refused is None and own.unit == "ollama.service"
    other = log_source("journal:sshd.service", None, PID, proc)
    assert isinstance(other, JournalLog) and other.refused == (
        "journal:sshd.service is not the journal of the shard's process "
        "(it runs as ollama.service), so it is not read"
    )


FIX = "send it to a file (> FILE 2>&1{flag}) or run it as a systemd unit, whose output the journal holds"


@pytest.mark.parametrize(
    ("cmdline", "fds", "said"),
    [
        (
            [SERVER],
            {1: "pipe:[81234]", 2: "pipe:[81234]"},
            "stderr, fd 2: pipe:[81234]",
        ),
        ([SERVER], {1: "/dev/pts/3", 2: "pipe:[7]"}, "stderr, fd 2: pipe:[7]"),
        ([SERVER], {1: "pipe:[7]", 2: "/dev/null"}, "stdout, fd 1: pipe:[7]"),
        (["vllm", "serve", "m"], {1: "pipe:[9]", 2: "pipe:[8]"}, "stdout, fd 1: pipe:[9]"),
    ],
)
def test_a_pipe_is_named_with_how_to_make_the_output_readable(
    tmp_path: Path, cmdline: list[str], fds: dict[int, str], said: str
) -> None:
    proc = proc_with(tmp_path / "proc", fds)
    started = launch(*cmdline)
    flag = "; or --log-file FILE" if started.engine == "llama.cpp" else ""
    assert piped_output(started, PID, proc) == (
        f"its output goes to a pipe ({said}), which only the process at its other end reads; "
        + FIX.format(flag=flag)
    )


@pytest.mark.parametrize("target", ["socket:[5521]", "/dev/null", "/dev/pts/3"])
def test_output_that_is_no_pipe_says_nothing_of_one(tmp_path: Path, target: str) -> None:
    proc = proc_with(tmp_path / "proc", {1: target, 2: target})
    assert piped_output(launch(SERVER), PID, proc) is None
