"""What a reader could not read, counted by why, and said once a node.

A message a view cannot take is lost to it: a worker of another schema (an old one whose
telemetry this reader no longer reads, a newer one), a payload that is not what its headers
say, a message naming another node than its subject's (impostors.py), one in another
partition than the mapping gives its node. Dropped quietly, its node would vanish from every
view with no word. So each is counted by reason (`placewatch_unreadable_messages_total`,
a line in `watch`), and the first of each node is logged at WARNING, naming the node, the
subject and what to do.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TypeVar

from msgspec import Struct

from placewatch.schemas import (
    SCHEMA_VERSION,
    DecodeError,
    SchemaError,
    decode,
    on_own_subject,
    subjects,
)
from placewatch.schemas.printable import printable

from .impostors import Impostors

log = logging.getLogger(__name__)

T = TypeVar("T", bound=Struct)

REASONS = ("schema", "malformed", "impostor", "partition")
LOGGED = 256
"""The most nodes whose first unreadable message is logged: the log is no node's to fill."""


def old_subject(schema: int) -> str:
    """Why a message of an older schema is not on a subject that carries it: that schema wrote
    names in subjects another way (schema 1: `_` for `.`)."""
    return (
        f"schema {schema}: its worker writes names in subjects as schema {schema} did, so its "
        "subject and its names disagree; upgrade the worker that sent it (docs/subjects.md, "
        "Changes)"
    )


class Unreadable:
    """The messages a reader could not take, by reason; the first of each node logged."""

    def __init__(self) -> None:
        self.counts = dict.fromkeys(REASONS, 0)
        self._said: set[str] = set()

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def found(self, reason: str, subject: str, why: str, *, said: bool = False) -> None:
        """Count a message of `subject` not taken for `reason` (one of REASONS), `why` in
        words; `said`: logged already, as impostors.py logs the first on each subject."""
        self.counts[reason] += 1
        node = subjects.node_of(subject)
        if said or node in self._said or len(self._said) >= LOGGED:
            return
        self._said.add(node)
        log.warning(
            "ignored a message of node %r on %s (%s): %s",
            node,
            printable(subject),
            reason,
            printable(why),
        )

    def read(
        self,
        data: bytes,
        type_: type[T],
        headers: Mapping[str, str] | None,
        subject: str,
        impostors: Impostors,
    ) -> T | None:
        """The message that came on `subject`, or None, counted here by why: not one
        (malformed), of another schema, or naming another node or shard than its subject's
        (an impostor, which `impostors` counts and logs by subject too)."""
        try:
            message = decode(data, type_, headers)
        except DecodeError as exc:
            reason = "schema" if isinstance(exc, SchemaError) else "malformed"
            self.found(reason, subject, str(exc))
            return None
        if on_own_subject(message, subject):
            return message
        schema = getattr(message, "schema", SCHEMA_VERSION)
        if isinstance(schema, int) and schema < SCHEMA_VERSION:  # names as they wrote them
            self.found("schema", subject, old_subject(schema))
            return None
        impostors.found(message, subject)
        self.found("impostor", subject, "", said=True)
        return None

    def summary(self) -> str | None:
        """One line for a person, or None while every message was read."""
        if not self.total:
            return None
        parts = ", ".join(f"{reason} {n}" for reason, n in self.counts.items() if n)
        return (
            f"{self.total} messages not read ({parts}): the log names the first of each node "
            "and what to do"
        )
