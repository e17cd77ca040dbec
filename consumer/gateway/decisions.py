"""A request's candidates less the backends to avoid, each change of mind said once.

A gateway asks on every request; what it is told changes only when a shard's verdict or a
node's silence does. So a decision is logged when it changes for a deployment (removed, put
back, a group all bad served anyway) and counted then, never once a request: a gateway
serving 1,000 requests a second must not write 1,000 lines a second about one shard.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from placewatch.schemas.printable import printable

from .backends import BadBackends, Why

log = logging.getLogger(__name__)

D = TypeVar("D")


class GroupFilter(Generic[D]):
    """Removes the deployments whose backend `bad` says to avoid from each request's
    candidates. `base_url` and `ident` read a deployment's base URL and its id (LiteLLM's
    `litellm_params.api_base` and `model_info.id`)."""

    def __init__(
        self,
        bad: BadBackends,
        base_url: Callable[[D], str | None],
        ident: Callable[[D], str],
    ) -> None:
        self.bad = bad
        self.base_url = base_url
        self.ident = ident
        self.decisions: Counter[tuple[str, str]] = Counter()
        """(what, why) -> how many times it was decided: ("removed", "cpu_fallback"),
        ("put back", ""), ("served all bad", "cpu_fallback")."""
        self.routed_around = 0
        """Requests from whose candidates at least one deployment was removed."""
        self._removed: dict[tuple[str, str], str] = {}
        """(group, deployment id) -> the verdict it was removed for."""
        self._all_bad: set[str] = set()
        """The groups served whole although every deployment in them is bad."""

    def filter(self, group: str, candidates: Sequence[D]) -> list[D]:
        """The candidates to keep for a request to `group`."""
        if not len(self.bad):
            if self._removed or self._all_bad:
                for d in candidates:
                    self._put_back(group, d)
                self._all_bad.discard(group)
            return list(candidates)
        kept: list[D] = []
        avoided: list[tuple[D, Why]] = []
        for d in candidates:
            url = self.base_url(d)
            why = None if url is None else self.bad.why(url)
            if why is None:
                kept.append(d)
                self._put_back(group, d)
            else:
                avoided.append((d, why))
        if not avoided:
            self._all_bad.discard(group)
            return kept
        if not kept and not self.bad.policy.may_empty:
            self._serve_all_bad(group, avoided)
            return list(candidates)
        self._all_bad.discard(group)
        for d, why in avoided:
            self._remove(group, d, why)
        self.routed_around += 1
        return kept

    def _remove(self, group: str, d: D, why: Why) -> None:
        key = (group, self.ident(d))
        if self._removed.get(key) == why.verdict:
            return
        self._removed[key] = why.verdict
        self.decisions["removed", why.verdict] += 1
        log.warning(
            "placewatch: removed %s (%s) from model group %s: %s",
            printable(key[1]),
            printable(self.base_url(d) or ""),
            printable(group),
            printable(why.sentence()),
        )

    def _put_back(self, group: str, d: D) -> None:
        key = (group, self.ident(d))
        if self._removed.pop(key, None) is None:
            return
        self.decisions["put back", ""] += 1
        log.warning(
            "placewatch: put %s (%s) back in model group %s: its shard is fine again",
            printable(key[1]),
            printable(self.base_url(d) or ""),
            printable(group),
        )

    def _serve_all_bad(self, group: str, avoided: list[tuple[D, Why]]) -> None:
        if group in self._all_bad:
            return
        self._all_bad.add(group)
        self.decisions["served all bad", avoided[0][1].verdict] += 1
        log.error(
            "placewatch: every deployment of model group %s is bad, serving them anyway "
            "(set may_empty to let the request fail instead): %s",
            printable(group),
            printable("; ".join(why.sentence() for _, why in avoided)),
        )
