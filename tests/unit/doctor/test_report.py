"""The doctor's report: its lines, the secrets kept out of them, and where the secrets come from."""

from __future__ import annotations

from pathlib import Path

from placewatch.worker.config import Settings
from placewatch.worker.doctor import Check, Report, secrets_of
from placewatch.worker.doctor.report import count

# A user JWT and its seed as `nsc generate creds` lays them out (values made up, same shape).
JWT = "eyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ.eyJqdGkiOiJBQkNERUZHIn0.c2lnbmF0dXJl"
SEED = "SUAIBDPBAUTWCWBKIO6XHQNINK5FWJW4OHLXC3HQ2KFE4PEJUA44CNHTC4"
CREDS = f"""-----BEGIN NATS USER JWT-----
{JWT}
------END NATS USER JWT------

************************* IMPORTANT *************************
NKEY Seed printed below can be used to sign and prove identity.
NKEYs are sensitive and should be treated as secrets.

-----BEGIN USER NKEY SEED-----
{SEED}
------END USER NKEY SEED------

*************************************************************
"""


def test_report_lines_never_hold_a_secret_or_url_credentials() -> None:
    said: list[str] = []
    report = Report(said.append, ["hunter2-token", "abc"])
    report.fail("x", "nats://u:pw-in-url@host:4222 said hunter2-token", "check abc")
    # Under 4 characters a secret is not hunted for: every "abc" in the text would go.
    assert said == ["fail  x: nats://***@host:4222 said ***; next: check abc"]
    assert report.failed


def test_a_secret_that_holds_another_is_taken_out_whole() -> None:
    said: list[str] = []
    report = Report(said.append, ["pass", "password-of-n1"])
    report.ok("x", "password-of-n1 and pass")
    assert said == ["ok    x: *** and ***"]


def test_a_line_says_what_to_do_next_only_when_there_is_something_to_do() -> None:
    assert Check("GPU tools", "ok", "2 GPUs").line() == "ok    GPU tools: 2 GPUs"
    assert (
        Check("engine pre-flight", "skip", "no --list-devices", "read its log").line()
        == "skip  engine pre-flight: no --list-devices; next: read its log"
    )


def test_the_report_failed_only_when_a_check_failed() -> None:
    report = Report(lambda line: None)
    report.ok("a", "fine")
    report.skip("b", "not here")
    before = report.failed
    report.fail("c", "broken", "mend it")
    assert (before, report.failed) == (False, True)
    assert [c.outcome for c in report.checks] == ["ok", "skip", "fail"]


def test_secrets_of_the_settings_a_url_and_the_jwt_and_seed_lines_of_the_files(
    tmp_path: Path,
) -> None:
    seed = tmp_path / "node.nk"
    seed.write_text(SEED + "\n")
    creds = tmp_path / "node.creds"
    creds.write_text(CREDS)
    settings = Settings(
        password="n1-password",
        token="t0ken-of-n1",
        nats=["nats://n1:url-password@nats-1:4222", "nats://nats-2:4222"],
        nkey_seed=str(seed),
        creds=str(creds),
    )
    assert secrets_of(settings) == [
        "n1-password",
        "t0ken-of-n1",
        "url-password",
        SEED,
        JWT,
        SEED,
    ]


def test_secrets_of_passes_over_a_file_it_cannot_read(tmp_path: Path) -> None:
    settings = Settings(token="t0ken-of-n1", creds=str(tmp_path / "missing.creds"))
    assert secrets_of(settings) == ["t0ken-of-n1"]


def test_count_says_one_or_many() -> None:
    assert count(1, "GPU") == "1 GPU"
    assert count(2, "GPU") == "2 GPUs"
    assert count(0, "process", "es") == "0 processes"
