"""The full-screen console of `placewatch watch` on a terminal, built on Textual.

A fixed header (nodes live and silent, shards by verdict, what fires, the bus, the newest
message's age), then the shards, one row each, problems first, or the nodes (tab), one row
each with a bar per GPU; `/` filters with globs, `o` sorts by the next column, Enter opens a
shard: its reason, evidence, placement, its GPUs' readings and its verdicts as this console
saw them, and the `doctor` command for its node. Keys are shown in the footer, and in full
with `?` (keys.py).

Each second (at most a third of the time: BUILD_SHARE) the board is built from a copy of what
the view holds, in a thread (the view goes on taking messages, and a key is answered
meanwhile: the build waits while one is, KEY_FIRST_S); a table holds every row of its order
and draws those on the screen (table.py).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from operator import attrgetter
from typing import ClassVar, NamedTuple

import anyio.to_thread
from textual import events, work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.css.query import NoMatches
from textual.widgets import ContentSwitcher, Footer, Input, Static

from placewatch.schemas.printable import printable

from .board import Board, Filtered, NodeRow, ShardRow, bar, duration, gpus_of, kept_nodes
from .command import Filters
from .keys import HelpScreen
from .table import RowTable
from .text import header_lines, shard_cells
from .watched import Taken, Watched

REASON_CHARS = 120
BUILD_SHARE = 3
"""A board is built at most every this many times as long as the last took to build."""
KEY_FIRST_S = 0.2
"""A board being built waits while a key pressed this recently is answered (its thread
holds the interpreter half of the time: every key waited on it)."""
KEY_WAIT_MOST_S = 1.0
"""The most a board waits on keys (one held down): the screen stays at most this late."""
SWEEP_S = 600.0
"""How often the objects kept out of the collector's passes are walked, for cycles."""
FULL_EVERY = 100
"""Passes of the collector's middle generation to one full pass (Python's default is 10)."""
BLOCKS = " ▁▂▃▄▅▆▇█"
SHARD_COLUMNS = ("node", "shard", "engine", "verdict", "state", "since", "gpus", "reason")
NODE_COLUMNS = ("node", "state", "GPU util", "GPU memory", "shards", "problems")
WIDTHS = {
    "node": 20, "shard": 24, "engine": 9, "verdict": 12, "state": 13, "since": 9, "gpus": 9,
    "reason": REASON_CHARS, "GPU util": 10, "GPU memory": 10, "problems": 80,
}  # fmt: skip
"""Each column's width: fixed, so that a redraw measures no cell; a longer cell is cut."""
_STYLES = {"cpu_fallback": "bold red", "misplaced": "red", "partial": "yellow", "unknown": "yellow"}


class Console(App[None]):
    TITLE = "placewatch"
    ENABLE_COMMAND_PALETTE = False
    CSS = """
    #header { height: auto; background: $boost; padding: 0 1; }
    #filter { display: none; }
    #filter.shown { display: block; }
    #count { height: 1; padding: 0 1; color: $text-muted; }
    #tables { height: 1fr; }
    #detail { display: none; height: 50%; border-top: solid $accent; padding: 0 1; }
    #detail.shown { display: block; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "quit"),
        Binding("slash", "filter", "filter"),
        Binding("tab", "switch", "shards/nodes", priority=True),
        Binding("o", "sort", "sort"),
        Binding("r", "reverse", "reverse"),
        Binding("p", "problems", "problems only"),
        Binding("question_mark,h", "help", "help"),
        Binding("escape", "close", "close", show=False),
    ]

    def __init__(
        self,
        watched: Watched,
        filters: Filters | None = None,
        *,
        connected: Callable[[], bool] = lambda: True,
        every_s: float = 1.0,
    ) -> None:
        super().__init__()
        self.watched = watched
        self.filters = filters or Filters()
        self.connected = connected
        self.every_s = every_s
        self.pattern = ""
        self.sort_by: int | None = None  # None: problems first
        self.reverse = False
        self.board: Board | None = None
        """The last board built, as the view held it (filtered when drawn)."""
        self.detail: str | None = None  # the key of the shard whose detail is open
        self._applied: Applied | None = None
        """The board with the filters applied, its shards ready for filter terms."""
        self._building = False
        self._next_at = 0.0
        self.drawn = 0
        """Boards drawn so far (tests and the benchmark wait on it)."""
        self._swept_at = time.monotonic()
        self._key_at = -KEY_FIRST_S
        self._waited = 0.0
        watched.pause = self._keys_first

    def compose(self) -> ComposeResult:
        yield Static(id="header", markup=False)
        yield Input(
            placeholder="glob on node, shard, engine, verdict (node:gpu-0*); Enter", id="filter"
        )
        yield Static(id="count", markup=False)
        with ContentSwitcher(initial="shards", id="tables"):
            shards = _columns(SHARD_COLUMNS)
            yield RowTable[ShardRow](shards, shard_cells, _key, _style, id="shards")
            yield RowTable[NodeRow](_columns(NODE_COLUMNS), _node_cells, _node_key, id="nodes")
        with VerticalScroll(id="detail"):
            yield Static(id="detail-text", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#shards", RowTable).focus()
        self.redraw()
        self.set_interval(self.every_s, self.redraw)

    def redraw(self) -> None:
        """A board built anew, unless one is being built (it will be drawn at once) or the
        last took long (a fleet of 10,000 nodes: building takes at most a third of the time)."""
        if not self._building and time.monotonic() >= self._next_at:
            self._building = True
            self._build()

    @work(group="redraw")
    async def _build(self) -> None:
        started = time.monotonic()
        try:
            taken = self.watched.take()  # on the loop; built in a thread, one at a time
            board, applied = await anyio.to_thread.run_sync(self._prepare, taken)
        finally:
            self._building = False
            self._next_at = started + BUILD_SHARE * (time.monotonic() - started)
        self.board, self._applied = board, applied
        try:
            self._draw()
        except NoMatches:  # the console closed while the board was built
            return
        # What the view and the console hold by now stays out of the collector's passes:
        # frozen once, each board's rows and looks and each second's messages still reached
        # its oldest generation, and its full passes over them (up to 0.3 s at 10,000 nodes,
        # every second or two) were what a key waited on. Acyclic, they are freed as ever
        # when let go; cycles among them wait for the sweep, one full pass each SWEEP_S.
        if self.drawn == 1:  # the full passes left walk a second's objects: seldom needed
            gc.set_threshold(*gc.get_threshold()[:2], FULL_EVERY)
        if time.monotonic() >= self._swept_at + SWEEP_S:
            self._swept_at = time.monotonic()
            gc.unfreeze()
            gc.collect()
        gc.freeze()

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, events.Key):
            self._key_at = time.monotonic()
        await super().on_event(event)

    def _keys_first(self) -> None:
        """In the board's thread: wait while a key is answered, KEY_WAIT_MOST_S a board."""
        while time.monotonic() - self._key_at < KEY_FIRST_S and self._waited < KEY_WAIT_MOST_S:
            time.sleep(0.005)
            self._waited += 0.005

    def _prepare(self, taken: Taken) -> tuple[Board, Applied]:
        """The board, and its shards ready to filter: built in a thread, not in a key's wait."""
        self._waited = 0.0
        board = self.watched.build(taken)
        applied = Applied.of(board, self.filters)
        self._keys_first()
        applied.filtered.prepared(self._keys_first)
        return board, applied

    def _draw(self) -> None:
        if self.board is None:
            return
        applied = self._applied
        if applied is None or applied.built is not self.board or applied.filters != self.filters:
            applied = self._applied = Applied.of(self.board, self.filters)  # `p` pressed
        board, whole = applied.board, applied.whole
        now = datetime.fromtimestamp(self.watched.clock(), UTC)
        state = "" if self.connected() else "  DISCONNECTED: showing the last known"
        header = header_lines(
            board.header, now, self.watched.where + state, self.watched.state.problems()
        )
        self.query_one("#header", Static).update("\n".join(header))
        terms = self.pattern.split()
        shards = applied.filtered.kept(terms)
        if self.sort_by is not None:  # stable: problems first within a column's ties
            column = attrgetter(SHARD_COLUMNS[self.sort_by])
            shown = sorted(shards, key=column, reverse=self.reverse)
        else:
            shown = shards[::-1] if self.reverse else shards
        self.query_one("#shards", RowTable).show(shown)
        held = self._kept_nodes(board, whole)
        nodes = kept_nodes(held, terms, attrgetter("node"))
        self.query_one("#nodes", RowTable).show(nodes)
        sort = "problems first" if self.sort_by is None else f"by {SHARD_COLUMNS[self.sort_by]}"
        sort += ", reversed" if self.reverse else ""
        said = (
            f"{len(shards)} of {len(whole.shards)} shards, {len(nodes)} of {len(whole.nodes)} nodes"
        )
        filtered = f"  filter: {self.pattern}" if self.pattern else ""
        self.query_one("#count", Static).update(printable(f"{said}  sorted {sort}{filtered}"))
        if self.detail is not None:
            self._show_detail(self.detail)
        self.drawn += 1

    def _kept_nodes(self, board: Board, whole: Board) -> list[NodeRow]:
        """The nodes shown: with problems only (`p`), those that need a person and those that
        hold a shard that does, a live node with a fallback among them."""
        if not self.filters.problems:
            return board.nodes
        held = {r.node for r in board.shards}
        return [n for n in whole.nodes if n.problems or n.node in held]

    def on_row_table_selected(self, event: RowTable.Selected) -> None:
        if event.table.id == "shards":
            self._show_detail(event.key)

    def on_row_table_header_selected(self, event: RowTable.HeaderSelected) -> None:
        if event.table.id == "shards":
            self.sort_by = event.column
            self._draw()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.pattern = event.value.strip()
        event.input.remove_class("shown")
        self._table().focus()
        self._draw()

    def action_filter(self) -> None:
        field = self.query_one("#filter", Input)
        field.add_class("shown")
        field.value = self.pattern
        field.focus()

    def action_switch(self) -> None:
        switcher = self.query_one("#tables", ContentSwitcher)
        switcher.current = "nodes" if switcher.current == "shards" else "shards"
        self._table().focus()

    def action_sort(self) -> None:
        self.sort_by = 0 if self.sort_by is None else self.sort_by + 1
        if self.sort_by >= len(SHARD_COLUMNS):
            self.sort_by = None
        self._draw()

    def action_reverse(self) -> None:
        self.reverse = not self.reverse
        self._draw()

    def action_problems(self) -> None:
        self.filters = self.filters._replace(problems=not self.filters.problems)
        self._draw()

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_close(self) -> None:
        field = self.query_one("#filter", Input)
        if field.has_class("shown"):
            field.remove_class("shown")
            self._table().focus()
        elif self.detail is not None:
            self.detail = None
            self.query_one("#detail").remove_class("shown")
        elif self.pattern:
            self.pattern = ""
            self._draw()

    def _table(self) -> RowTable[ShardRow] | RowTable[NodeRow]:
        current = self.query_one("#tables", ContentSwitcher).current or "shards"
        return self.query_one(f"#{current}", RowTable)

    def _show_detail(self, key: str) -> None:
        items = self.query_one("#shards", RowTable).items
        row = next((r for r in items if _key(r) == key), None)
        if row is None:
            return
        self.detail = key
        self.query_one("#detail-text", Static).update("\n".join(detail_lines(self.watched, row)))
        self.query_one("#detail").add_class("shown")


class Applied(NamedTuple):
    """A board as built, and with the console's filters applied."""

    built: Board
    filters: Filters
    board: Board
    """`built` with every filter applied."""
    whole: Board
    """`built` with the filters of nodes and shards applied, not `problems`."""
    filtered: Filtered
    """`board`'s shards, for filter terms."""

    @classmethod
    def of(cls, built: Board, filters: Filters) -> Applied:
        board = filters.apply(built)
        whole = filters._replace(problems=False).apply(built)
        return cls(built, filters, board, whole, Filtered(board.shards))


def detail_lines(watched: Watched, row: ShardRow) -> list[str]:
    """What one shard's pane says: its reason, evidence, placement, its GPUs' readings, its
    verdicts as this console saw them, and what to run on its node."""
    s = row.status
    pod = f"  pod {s.pod_namespace}/{s.pod_name} ({s.container_name or '?'})" if s.pod_name else ""
    out = [
        f"{row.node} / {row.shard}   {row.verdict}   {row.state}   "
        f"since {row.since:%Y-%m-%d %H:%M:%S}Z",
        f"engine {row.engine}  backend {s.backend}  pid {s.pid or '-'}  placed GPUs {row.placed}"
        f"  holds memory on {row.used}{pod}",
        "",
        "reason:",
        f"  {s.reason or '-'}",
    ]
    if s.evidence:
        out += ["", "evidence (the engine's own lines):", *(f"  {line}" for line in s.evidence)]
    look = watched.look(row.node)
    wanted = set(s.placed_gpus) | {d.index for d in s.devices}
    if look is not None and wanted:
        out += ["", "its GPUs, as the node last read them:"]
        for g in map(bar, gpus_of(look)):
            if g.gpu in wanted:
                util = "-" if g.util_pct is None else f"{g.util_pct:.0f}%"
                used = "-" if g.used is None else f"{g.used / (1 << 30):.1f} GiB"
                temp = "-" if g.temperature_c is None else f"{g.temperature_c:.0f} C"
                out.append(f"  GPU {g.gpu}  util {util}  memory used {used}  {temp}")
    history = watched.history.get((row.node, row.shard), ())
    if history:
        out += ["", "its verdicts, as this console saw them:"]
        out += [
            f"  {c.time:%H:%M:%S}Z  {c.verdict}{' (stale)' if c.stale else ''}  {c.reason}"
            for c in history
        ]
    out += ["", f"on {row.node}: placewatch doctor --node {row.node}"]
    if row.silent:
        out.append(f"silent node: if it is gone for good, placewatch forget {row.node}")
    return [printable(line)[: REASON_CHARS * 4] for line in out]


def _key(row: ShardRow) -> str:
    return f"{row.node}\x00{row.shard}"


def _node_key(row: NodeRow) -> str:
    return row.node


def _columns(names: Sequence[str]) -> list[tuple[str, int]]:
    return [(name, WIDTHS.get(name, 24)) for name in names]


def _style(column: str, text: str) -> str:
    if column == "verdict":
        return _STYLES.get(text, "")
    return "bold red" if column == "state" and "FIRING" in text else ""


def _node_cells(n: NodeRow) -> tuple[str, ...]:
    bars = [bar(g) for g in gpus_of(n.look)]
    state = f"silent {duration(n.age_s)}" if n.silent else "live"
    util = _bars([g.util_pct for g in bars])
    memory = _bars(
        [None if not g.total or g.used is None else 100 * g.used / g.total for g in bars]
    )
    shards = " ".join(f"{count} {verdict}" for verdict, count in sorted(n.verdicts.items()))
    problems = "; ".join(n.problems) + (f"  (placewatch forget {n.node})" if n.forget else "")
    return tuple(
        printable(c) for c in (n.node, state, util, memory, shards or "-", problems or "-")
    )


def _bars(pcts: Sequence[float | None]) -> str:
    """A block a GPU, its height the share (nvitop's bars, one character each); `?` unread."""
    return (
        "".join(
            "?" if p is None else BLOCKS[min(round(p / 100 * (len(BLOCKS) - 1)), len(BLOCKS) - 1)]
            for p in pcts
        )
        or "-"
    )
