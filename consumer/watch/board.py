"""What `placewatch watch` shows, whatever draws it: a header of counts, one row per shard,
problems first, and one row per node, from what a view holds at one moment; pure.

A node is silent once its last telemetry is older than SILENT_INTERVALS of its intervals (as
the exporter and `placewatch health` judge a node down). Its shards keep their last verdict,
marked silent: a dead node's shards are not capacity, and its fallbacks still fire (alerts
resolve only on evidence), so the header counts those apart. A node silent FORGET_AFTER_S is
named with `placewatch forget NODE`.
"""

from __future__ import annotations

import bisect
import fnmatch
import itertools
import operator
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import NamedTuple, TypeVar

from placewatch.schemas import (
    FALLBACK_VERDICTS,
    ComputeStatus,
    GpuReading,
    NodeInventory,
    NodeTelemetry,
)
from placewatch.schemas.evidence import BLIND_AFTER_S, evidence_age_s, node_blind

from ..capacity import STALE_INTERVALS
from ..held import Held, decode_held

SILENT_INTERVALS = STALE_INTERVALS
FORGET_AFTER_S = 15 * 60.0
"""A node silent this long is offered to `placewatch forget`."""
CLOCK_OFF_S = 2.0
"""A node's clock further off the view's than this is a problem of the node (the exporter's
PlacewatchNodeClockOff fires at the same)."""

R = TypeVar("R")
"""A node's row, or its name (kept_nodes)."""
FILTERED = ("node", "shard", "engine", "verdict", "state")
"""The fields a filter's glob matches, each alone with `field:glob`."""
_RANKS = {"cpu_fallback": 0, "misplaced": 1, "partial": 2}
STALE_RANK, SILENT_RANK, PROBLEM_RANK = 3, 4, 5
"""Rows ranked below PROBLEM_RANK need a person (rank())."""


class NodeLook(NamedTuple):
    """A node as the board needs it, from its latest telemetry: atoms and tuples of atoms,
    which the garbage collector stops walking, where 80,000 GPU readings' lists would be in
    each of its full passes (0.5 s at 10,000 nodes); the readings are decoded again for the
    rows shown (gpus_of)."""

    node: str
    seen: float
    """When the view took its latest telemetry (seconds since the epoch, the view's clock)."""
    time: float
    """When the node says it sampled (its clock)."""
    interval_s: float
    session: str
    telemetry: Held
    gpu_count: int
    gpu_problems: tuple[tuple[int, tuple[str, ...]], ...] = ()
    """Each unhealthy GPU's index and why."""
    failed_sources: tuple[str, ...] = ()
    blind: bool = False
    """None of its GPU tools answers (schemas/evidence.py)."""


def look(node: str, held: Held, inventory: Held | None = None) -> NodeLook:
    """The node as its telemetry `held` says it; its `inventory`, read only where it alone
    tells whether the node is blind (it lists GPUs that no tool read)."""
    t = decode_held(held, NodeTelemetry)
    blind = node_blind(t) or (node_blind(t, gpus_known=True) and _lists_gpus(inventory, t))
    return NodeLook(
        node,
        held.seen,
        t.time.timestamp(),
        t.interval_s,
        t.session,
        held,
        len(t.gpus),
        tuple((g.index, tuple(g.problems)) for g in t.gpus if g.problems),
        tuple(s.error or s.name for s in t.sources if not s.ok),
        blind,
    )


def _lists_gpus(inventory: Held | None, t: NodeTelemetry) -> bool:
    if inventory is None or inventory.inventory != t.inventory:
        return False
    return bool(decode_held(inventory, NodeInventory).gpus)


def gpus_of(look: NodeLook) -> list[GpuReading]:
    """The node's GPUs as it last read them."""
    return decode_held(look.telemetry, NodeTelemetry).gpus


class GpuBar(NamedTuple):
    """What the board shows of a GPU (bar())."""

    gpu: int
    util_pct: float | None
    used: int | None
    total: int | None
    temperature_c: float | None
    problems: tuple[str, ...]


class ShardRow(NamedTuple):
    rank: int
    node: str
    shard: str
    engine: str
    verdict: str
    since: datetime
    placed: str
    used: str
    reason: str
    firing: bool
    stale: bool
    """Its verdict stands on evidence since lost (ComputeStatus.stale)."""
    silent: bool
    """Its node went silent: the verdict is the last it said."""
    status: ComputeStatus
    blind: bool = False
    """Stale longer than BLIND_AFTER_S: its blindness alerts (docs/shards.md, Blindness)."""

    @property
    def state(self) -> str:
        """FIRING, stale (blind past the limit), silent, as they hold, joined by commas; `-`
        for none."""
        lost = "blind" if self.blind else "stale"
        said = [
            w
            for w, on in (("FIRING", self.firing), (lost, self.stale), ("silent", self.silent))
            if on
        ]
        return ",".join(said) or "-"

    @property
    def gpus(self) -> str:
        """The GPUs it is placed on / those its processes hold memory on: `1/-` for none."""
        return f"{self.placed}/{self.used}"

    @property
    def problem(self) -> bool:
        return self.rank < PROBLEM_RANK


class NodeRow(NamedTuple):
    node: str
    silent: bool
    age_s: float
    session: str
    look: NodeLook
    verdicts: dict[str, int]
    problems: tuple[str, ...]
    """Why it needs a person: silent, unhealthy GPUs, GPU tools failing, a clock that is off."""

    @property
    def forget(self) -> bool:
        """Whether it has been silent long enough to offer `placewatch forget`."""
        return self.silent and self.age_s >= FORGET_AFTER_S


class Header(NamedTuple):
    live: int
    silent: int
    verdicts: dict[str, int]
    shards: int
    firing: int
    firing_silent: int
    """Of `firing`, those on silent nodes."""
    newest_age_s: float | None
    """How old the newest telemetry is; None without any."""


class Board(NamedTuple):
    header: Header
    shards: list[ShardRow]
    nodes: list[NodeRow]


def build(
    looks: Iterable[NodeLook],
    statuses: Iterable[ComputeStatus],
    since: Mapping[tuple[str, str], datetime],
    now: float,
    row: Callable[[ComputeStatus, datetime, bool, bool], ShardRow] | None = None,
) -> Board:
    """The board at `now` (seconds since the epoch): `since`, when each firing shard entered
    its fallback (FleetState keeps it); `row` makes a shard's row (shard_row, or a cache of
    it)."""
    row = row or shard_row
    nodes: dict[str, NodeRow] = {}
    for look in looks:
        nodes[look.node] = _node_row(look, now)
    rows = []
    by_node: dict[str, dict[str, int]] = {}
    for s in statuses:
        node = nodes.get(s.node)
        silent = node is not None and node.silent
        blind = s.stale and _blind(s, node, now)
        rows.append(row(s, since.get((s.node, s.shard), s.time), silent, blind))
        counted = by_node.get(s.node)
        if counted is None:
            counted = by_node[s.node] = {}
        counted[s.verdict] = counted.get(s.verdict, 0) + 1
    for name, counted in by_node.items():
        if name in nodes:
            nodes[name] = nodes[name]._replace(verdicts=counted)
    rows.sort(key=_order)
    ordered = sorted(nodes.values(), key=lambda n: (not n.problems, n.node))
    quiet = sum(1 for n in nodes.values() if n.silent)
    newest = min((n.age_s for n in nodes.values()), default=None)
    header = Header(
        live=len(nodes) - quiet,
        silent=quiet,
        verdicts=dict(Counter(r.verdict for r in rows)),
        shards=len(rows),
        firing=sum(1 for r in rows if r.firing),
        firing_silent=sum(1 for r in rows if r.firing and r.silent),
        newest_age_s=newest,
    )
    return Board(header, rows, ordered)


_order = operator.itemgetter(0, 1, 2)
"""A row's rank, node and shard: where it sorts."""


def rank(verdict: str, stale: bool, silent: bool) -> int:
    """Where a shard sorts, problems first: cpu_fallback, misplaced, partial, then unknown or
    stale evidence, then the shards of silent nodes; then starting, then the rest."""
    if silent:
        return SILENT_RANK
    if verdict in _RANKS:
        return _RANKS[verdict]
    if stale or verdict == "unknown":
        return STALE_RANK
    return PROBLEM_RANK if verdict == "starting" else PROBLEM_RANK + 1


def _blind(s: ComputeStatus, node: NodeRow | None, now: float) -> bool:
    """Whether the shard's evidence was lost longer than BLIND_AFTER_S ago, on its node's
    clock (the view's now plus the node's offset)."""
    offset = 0.0 if node is None else node.look.time - node.look.seen
    at = datetime.fromtimestamp(now + offset, UTC)
    return evidence_age_s(s, at) >= BLIND_AFTER_S


def shard_row(s: ComputeStatus, since: datetime, silent: bool, blind: bool = False) -> ShardRow:
    devices = s.devices
    used = ",".join(map(str, sorted({d.index for d in devices}))) if devices else ""
    return ShardRow(  # by position: 40,000 rows a board, where keywords cost a third more
        rank(s.verdict, s.stale, silent),
        s.node,
        s.shard,
        s.engine or "-",
        s.verdict,
        since,
        ",".join(map(str, s.placed_gpus)) or "cpu",
        used or "-",
        s.reason,
        s.verdict in FALLBACK_VERDICTS,
        s.stale,
        silent,
        s,
        blind,
    )


def _node_row(look: NodeLook, now: float) -> NodeRow:
    age = max(now - look.seen, 0.0)
    silent = age > SILENT_INTERVALS * look.interval_s
    problems = []
    if silent:
        problems.append(f"silent {duration(age)}")
    for index, sick in look.gpu_problems:
        problems.append(f"GPU {index} unhealthy: {'; '.join(sick)}")
    if look.blind:
        problems.append(f"BLIND: no GPU tool answers: {'; '.join(look.failed_sources)}")
    elif not look.gpu_count and look.failed_sources:
        problems.append(f"no GPUs: {'; '.join(look.failed_sources)}")
    offset = look.time - look.seen
    if abs(offset) > CLOCK_OFF_S:
        problems.append(f"clock {abs(offset):.0f} s {'ahead' if offset > 0 else 'behind'}")
    return NodeRow(look.node, silent, age, look.session, look, {}, tuple(problems))


def bar(g: GpuReading) -> GpuBar:
    """What the board shows of a GPU as its node's telemetry read it (memory total: used and
    free; the driver's reserve is the inventory's)."""
    used, free = g.memory_used_bytes, g.memory_free_bytes
    total = used + free if used is not None and free is not None else None
    return GpuBar(g.index, g.utilization_pct, used, total, g.temperature_c, tuple(g.problems))


def matches(row: ShardRow, pattern: str) -> bool:
    """Whether a glob (`gpu-00*`, `*fallback`; a bare word matches within) matches the row's
    node, shard, engine or verdict, case-insensitively; `field:glob` (node, shard, engine,
    verdict, state) matches that field only."""
    return matcher(pattern)(row)


def matcher(pattern: str) -> Callable[[ShardRow], bool]:
    """matches() for one pattern, its glob compiled once."""
    field, test = _compiled(pattern)
    fields = (field,) if field in FILTERED else FILTERED
    return lambda row: any(test.search(getattr(row, f).replace("\n", " ")) for f in fields)


def _compiled(pattern: str) -> tuple[str, re.Pattern[str]]:
    """A filter term's field ("" for any) and its glob as a regex of a whole line."""
    field, _, glob = pattern.partition(":") if ":" in pattern else ("", "", pattern)
    return field, _line(glob)


def _line(glob: str) -> re.Pattern[str]:
    """A glob (a bare word matches within) as a case-insensitive regex that finds the lines
    it matches whole, once or more each. A leading or trailing `*` leaves that end free
    rather than matching it as `.*`: the word is looked for, not every line backtracked."""
    if not any(c in glob for c in "*?["):
        glob = f"*{glob}*"
    core = glob.strip("*")
    if not core:
        return re.compile("^", re.MULTILINE)
    inner = fnmatch.translate(core).removeprefix("(?s:").removesuffix(")\\Z")
    head = "" if glob.startswith("*") else "^"
    tail = "" if glob.endswith("*") else "$"
    return re.compile(f"{head}(?:{inner}){tail}", re.IGNORECASE | re.MULTILINE)


class Filtered:
    """Rows kept by filter terms (matches()), each field of them all searched as one text by
    one regex: 40,000 rows in milliseconds, where a match a row a field took 300 ms."""

    def __init__(self, rows: list[ShardRow]) -> None:
        self.rows = rows
        self._texts: dict[str, tuple[str, list[int]]] = {}

    def kept(self, terms: list[str]) -> list[ShardRow]:
        if not terms:
            return self.rows
        found: set[int] | None = None
        for term in terms:
            field, test = _compiled(term)
            indices: set[int] = set()
            for f in (field,) if field in FILTERED else FILTERED:
                text, starts = self._text(f)
                indices.update(
                    bisect.bisect_right(starts, m.start()) - 1 for m in test.finditer(text)
                )
            found = indices if found is None else found & indices
        return [self.rows[i] for i in sorted(found or ())]

    def prepared(self, between: Callable[[], None] = lambda: None) -> Filtered:
        """Itself, each field's text made (`between` called after each): what the first
        filter would otherwise wait on (40,000 rows, tens of ms), done where the board is
        built."""
        for field in FILTERED:
            self._text(field)
            between()
        return self

    def _text(self, field: str) -> tuple[str, list[int]]:
        """The field of every row, a line each (a line break in one made a space), and
        where each line starts."""
        held = self._texts.get(field)
        if held is None:
            values = list(map(operator.attrgetter(field), self.rows))
            text = "\n".join(values)
            if text.count("\n") >= len(values):  # a line break in a value
                text = "\n".join(v.replace("\n", " ") for v in values)
            lengths = map((1).__add__, map(len, values))
            starts = list(itertools.accumulate(lengths, initial=0))
            held = self._texts[field] = (text, starts[:-1])
        return held


def node_matches(node: str, pattern: str) -> bool:
    """Whether a filter term keeps a node: a `node:` glob or a bare one must match its name;
    a term on another field keeps every node."""
    return kept_nodes([node], [pattern], str) == [node]


def kept_nodes(nodes: list[R], terms: list[str], name: Callable[[R], str]) -> list[R]:
    """The nodes every term keeps (node_matches), each term's glob compiled once and matched
    against the name as one line (a line break in it made a space, as Filtered does)."""
    tests = []
    for term in terms:
        field, _, glob = term.partition(":") if ":" in term else ("node", "", term)
        if field == "node":
            tests.append(_line(glob).search)
    if not tests:
        return nodes
    return [n for n in nodes if all(test(name(n).replace("\n", " ")) for test in tests)]


def selected(
    board: Board,
    *,
    node: str | None = None,
    shard: str | None = None,
    problems: bool = False,
) -> Board:
    """The board with only the rows of nodes and shards matching the globs (exactly, as a
    shell matches names), and with `problems` only the rows that need a person."""
    if node is None and shard is None and not problems:
        return board
    rows = [
        r
        for r in board.shards
        if (node is None or fnmatch.fnmatchcase(r.node, node))
        and (shard is None or fnmatch.fnmatchcase(r.shard, shard))
        and (not problems or r.problem)
    ]
    holding = {r.node for r in rows}
    nodes = [
        n
        for n in board.nodes
        if (node is None or fnmatch.fnmatchcase(n.node, node))
        and (not problems or n.problems)
        and (shard is None or n.node in holding)
    ]
    return Board(board.header, rows, nodes)


def duration(seconds: float) -> str:
    """`42 s`, `7 min`, `3 h`, `2 d`: how long, to the unit that says it."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= 2 * size:
            return f"{seconds // size:.0f} {unit}"
    return f"{seconds:.0f} s"
