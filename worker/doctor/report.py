"""The doctor's report: one line per check, printed as it is made, with no secret in it.

A server URL goes through `redact`, and every line is scrubbed of the secrets
that `secrets_of` finds: the password, the token, a password in a server URL,
and the seed and JWT lines of the seed and credentials files. A credentials
setting is named by the checks, never shown.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from placewatch.connection import redact

from ..bus.options import MAX_CREDENTIALS_BYTES
from ..config import Settings
from ..files import UnusableFile, read_text

Outcome = Literal["ok", "fail", "skip"]


@dataclass(frozen=True)
class Check:
    """One line of the report."""

    name: str
    outcome: Outcome
    found: str
    todo: str | None = None
    """What to do next; said for every failure."""

    def line(self) -> str:
        text = f"{self.outcome:<4}  {self.name}: {self.found}"
        return f"{text}; next: {self.todo}" if self.todo else text


class Report:
    """Checks as they are made, each printed at once with every secret taken out."""

    def __init__(self, write: Callable[[str], None], secrets: Iterable[str] = ()) -> None:
        self.checks: list[Check] = []
        self._write = write
        # Longest first, so a secret that holds another is replaced whole; a secret of 3
        # characters or fewer is not hunted for, as every such run of text would go with it.
        self._secrets = sorted({s for s in secrets if len(s) >= 4}, key=len, reverse=True)

    def add(self, check: Check) -> None:
        self.checks.append(check)
        self._write(self.scrub(check.line()))

    def ok(self, name: str, found: str) -> None:
        self.add(Check(name, "ok", found))

    def fail(self, name: str, found: str, todo: str) -> None:
        self.add(Check(name, "fail", found, todo))

    def skip(self, name: str, found: str, todo: str | None = None) -> None:
        self.add(Check(name, "skip", found, todo))

    def scrub(self, text: str) -> str:
        text = redact(text)
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    @property
    def failed(self) -> bool:
        return any(c.outcome == "fail" for c in self.checks)


def secrets_of(settings: Settings) -> list[str]:
    """Every secret the settings hold or point to, to keep out of the output."""
    found = [s for s in (settings.password, settings.token) if s]
    found += [p for p in (urlsplit(u).password for u in settings.nats) if p]
    for path in (settings.nkey_seed, settings.creds):
        try:
            text = read_text(path, MAX_CREDENTIALS_BYTES) if path else ""
        except UnusableFile:
            continue  # the server check says what is wrong with it
        # The seed and JWT lines; not the armour or the notice between them.
        words = (line.strip() for line in text.splitlines())
        found += [w for w in words if len(w) >= 16 and " " not in w and w[:3] not in ("---", "***")]
    return found


def count(n: int, noun: str, plural: str = "s") -> str:
    """`n` and its noun, as every check says them: "1 GPU", "2 GPUs", "3 processes"."""
    return f"{n} {noun}{'' if n == 1 else plural}"
