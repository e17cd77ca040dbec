"""Messages that came on one node's subject and named another node.

The servers' permissions let a node publish on its own subjects only, with any content; a
message there that names another node (placewatch.schemas.on_own_subject) is the node
speaking for another, or a publisher that writes the wrong subject. A reader refuses it:
taken, it would replace what the other node said of itself.
"""

from __future__ import annotations

import logging

from msgspec import Struct

from placewatch.schemas.codec import why_refused
from placewatch.schemas.printable import printable

log = logging.getLogger(__name__)

LOGGED = 256
"""The most subjects whose first such message is logged: a node may publish on subjects of
its own without end (a shard token each), and the log is not its to fill."""


class Impostors:
    """The subjects such messages came on (the first LOGGED of them), each with how many
    came; the first on each logged."""

    def __init__(self) -> None:
        self.by_subject: dict[str, int] = {}
        self.count = 0

    def found(self, message: Struct, subject: str) -> None:
        self.count += 1
        seen = self.by_subject.get(subject)
        if seen is not None:
            self.by_subject[subject] = seen + 1
        elif len(self.by_subject) < LOGGED:
            self.by_subject[subject] = 1
            log.warning(
                "ignored a %s on %s: %s",
                type(message).__name__,
                printable(subject),
                why_refused(message, subject),
            )
