"""The messages `placewatch alerts` skips, told in its log without letting a publisher fill it.

A message on the events stream that is not the ComputeStatus or FallbackEvent its subject
says, or that names another node or shard than its subject's (consumer/impostors.py), is
never deliverable: it is terminated, and the ones behind it are delivered. A node may publish
on its own subjects without end and with any content, so not every such message is logged:
on each subject the 1st, the 10th, the 100th and so on, each with how many were skipped
there; on subjects past the first LOGGED, the same by their shared count.
"""

from __future__ import annotations

import logging

from placewatch.schemas.printable import printable

log = logging.getLogger(__name__)

LOGGED = 256
"""The most subjects counted one by one: a node may publish on subjects of its own without
end (a shard token each)."""


class Skipped:
    """How many messages were skipped on each subject (the first LOGGED), and elsewhere."""

    def __init__(self) -> None:
        self.by_subject: dict[str, int] = {}
        self.elsewhere = 0
        """Skipped on subjects past the first LOGGED."""

    def skip(self, seq: int, subject: str, why: str) -> None:
        """Count message `seq` on `subject`, skipped for `why`; log it where its count is
        1, 10, 100 ..."""
        if subject in self.by_subject or len(self.by_subject) < LOGGED:
            seen = self.by_subject[subject] = self.by_subject.get(subject, 0) + 1
            if seen == 1:
                log.error("skipped message %d on %s: %s", seq, printable(subject), printable(why))
                return
            where = "this subject"
        else:
            seen = self.elsewhere = self.elsewhere + 1
            where = f"subjects past the first {LOGGED}"
        if _is_power_of_ten(seen):
            log.error(
                "skipped message %d on %s: %s (%d skipped on %s; logged at 1, 10, 100 ...)",
                seq,
                printable(subject),
                printable(why),
                seen,
                where,
            )


def _is_power_of_ten(n: int) -> bool:
    digits = str(n)
    return digits[0] == "1" and digits.count("0") == len(digits) - 1
