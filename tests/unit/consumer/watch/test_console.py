"""The console, driven as a person drives it, through Textual's own Pilot: at 1,000 nodes the
firing shards are on the first screen with their nodes; `/` filters, `o` sorts, Enter opens a
shard, tab shows the nodes, `q` quits."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest

pytest.importorskip("textual", reason="the console needs Textual: pip install '.[console]'")

from textual.binding import Binding
from textual.pilot import Pilot
from textual.widgets import Static

from placewatch.consumer.watch.command import Filters
from placewatch.consumer.watch.console import KEY_FIRST_S, KEY_WAIT_MOST_S, Console
from placewatch.consumer.watch.keys import KEYS, HelpScreen, help_text
from placewatch.consumer.watch.table import RowTable
from placewatch.consumer.watch.watched import Watched

from tests.conftest import ROOT
from tests.support.console_fleet import NOW, dead_name, fleet_state, live_name
from tests.support.screen import screen_text

SIZE = (200, 50)


def console(filters: Filters | None = None, **kwargs: int) -> Console:
    watched = Watched(
        fleet_state(**kwargs), "nats://127.0.0.1:4222", clock=lambda: NOW.timestamp() + 1
    )
    return Console(watched, filters, every_s=3600)  # drawn once, then on keys only


def drive(app: Console, steps: Callable[[Pilot[None]], Awaitable[None]]) -> None:
    async def run() -> None:
        async with app.run_test(size=SIZE) as pilot:
            for _ in range(200):  # the first board is built in a thread
                if app.drawn:
                    break
                await pilot.pause(0.05)
            assert app.drawn, "the console drew no board in 10 s"
            await steps(pilot)

    asyncio.run(run())


def rows(app: Console, table: str = "shards") -> list[list[str]]:
    t = app.query_one(f"#{table}", RowTable)
    return [list(t.cells_at(i)) for i in range(t.row_count)]


def test_at_1000_nodes_the_header_and_the_firing_shards_are_on_the_first_screen() -> None:
    app = console()

    async def look(pilot: Pilot[None]) -> None:
        for _ in range(200):  # the board drawn, then the screen refreshed with it
            screen = screen_text(app)
            said = "\n".join(screen)
            if "nodes 1000 live" in said and "FIRING" in said:
                break
            await pilot.pause(0.05)
        assert "nodes 1000 live, 27 silent" in said
        assert "42 firing, 27 on silent nodes" in said
        assert "4108 of 4108 shards, 1027 of 1027 nodes  sorted problems first" in said
        firing = [line for line in screen if "cpu_fallback" in line and "FIRING" in line]
        # the 15 on live nodes, then those on silent nodes, as many as the screen holds
        nodes = [line.split()[0] for line in firing]
        assert nodes[:15] == [live_name(i) for i in range(0, 1000, 71)], screen
        assert len(firing) >= 20 and dead_name(0) in nodes
        footer = screen[-1]  # the keys
        assert all(key in footer for key in ("q quit", "/ filter", "o sort", "tab shards/nodes"))

    drive(app, look)


def test_slash_filters_by_glob_and_escape_clears_it() -> None:
    app = console(live=100)  # 127 nodes' 508 shards

    async def steps(pilot: Pilot[None]) -> None:
        await pilot.press("slash")
        await pilot.press(*"node:old-0*", "space", *"verdict:cpu*", "enter")
        shown = rows(app)
        assert [r[0] for r in shown] == [dead_name(i) for i in range(10)]
        assert all(r[3] == "cpu_fallback" and r[4] == "FIRING,silent" for r in shown)
        assert "10 of 508 shards" in str(app.query_one("#count", Static).render())
        await pilot.press("escape")
        assert len(rows(app)) == 508

    drive(app, steps)


def test_o_sorts_by_the_next_column_and_r_reverses() -> None:
    app = console(live=30, dead=2)

    async def steps(pilot: Pilot[None]) -> None:
        assert rows(app)[0][4] == "FIRING"  # problems first
        await pilot.press("o")  # by node
        names = [r[0] for r in rows(app)]
        assert names == sorted(names) and names[0] == live_name(0)
        await pilot.press("r")
        assert rows(app)[0][0] == dead_name(1)
        await pilot.press("o", "o", "o")  # by verdict, reversed
        verdicts = [r[3] for r in rows(app)]
        assert verdicts == sorted(verdicts, reverse=True)

    drive(app, steps)


def test_enter_opens_the_shard_its_reason_evidence_gpus_history_and_doctor() -> None:
    app = console(live=100, dead=1)

    async def steps(pilot: Pilot[None]) -> None:
        await pilot.press("enter")  # the first row: gpu-0000's fallback
        detail = str(app.query_one("#detail-text", Static).render())
        assert detail.splitlines()[0].startswith("gpu-0000 / shard-01   cpu_fallback   FIRING")
        assert "placed on GPU 1 but computing on the CPU" in detail
        assert "  load_tensors: offloaded 0/33 layers to GPU" in detail
        assert "  GPU 1  util 13%  memory used 20.5 GiB  41 C" in detail
        assert "its verdicts, as this console saw them:\n  08:00:00Z  cpu_fallback" in detail
        assert detail.rstrip().endswith("on gpu-0000: placewatch doctor --node gpu-0000")
        assert app.query_one("#detail").has_class("shown")
        for _ in range(100):  # on the screen, under the table
            if "evidence (the engine's own lines):" in "\n".join(screen_text(app)):
                break
            await pilot.pause(0.05)
        assert "  load_tensors: offloaded 0/33 layers to GPU" in "\n".join(screen_text(app))
        await pilot.press("escape")
        assert not app.query_one("#detail").has_class("shown")

    drive(app, steps)


def test_tab_shows_the_nodes_problems_first_with_a_bar_per_gpu() -> None:
    app = console(live=20, dead=2)

    async def steps(pilot: Pilot[None]) -> None:
        await pilot.press("tab")
        shown = rows(app, "nodes")
        assert [r[0] for r in shown[:2]] == [dead_name(0), dead_name(1)]
        assert shown[0][1] == "silent 60 min" and "placewatch forget old-00" in shown[0][5]
        live = shown[2]
        assert live[1] == "live" and len(live[2]) == 8 and len(live[3]) == 8  # a block a GPU
        assert live[4] == "1 cpu_fallback 3 gpu" and live[0] == live_name(0)

    drive(app, steps)


def test_p_keeps_the_problems_and_q_quits() -> None:
    app = console(live=200, dead=3)

    async def steps(pilot: Pilot[None]) -> None:
        await pilot.press("p")
        for _ in range(100):
            if len(rows(app)) == 3 + 3 * 4:
                break
            await pilot.pause(0.05)
        assert len(rows(app)) == 3 + 3 * 4  # gpu-0000, 0071, 0142, and every shard of the dead
        await pilot.press("q")
        assert not app.is_running

    drive(app, steps)


def test_a_board_being_built_waits_while_a_key_is_answered_and_a_held_key_a_second() -> None:
    app = console(live=200, dead=3)

    async def steps(pilot: Pilot[None]) -> None:
        before = time.monotonic()
        await pilot.press("down")
        pressed = app._key_at
        assert pressed >= before  # the press was seen
        await asyncio.to_thread(app._keys_first)  # what the board's thread calls
        assert time.monotonic() - pressed >= KEY_FIRST_S
        app._key_at, app._waited = time.monotonic() + 3600, 0.0  # a key held down
        await asyncio.to_thread(app._keys_first)
        assert KEY_WAIT_MOST_S <= app._waited < KEY_WAIT_MOST_S + 0.1

    drive(app, steps)


def test_p_counts_the_live_node_of_a_fallback_among_the_nodes() -> None:
    app = console(live=20, dead=0)  # gpu-0000's shard-01 in cpu_fallback, nothing else wrong

    async def steps(pilot: Pilot[None]) -> None:
        await pilot.press("p")
        count = str(app.query_one("#count", Static).render())
        assert count.startswith("1 of 80 shards, 1 of 20 nodes"), count
        assert [r[:2] for r in rows(app)] == [[live_name(0), "shard-01"]]
        await pilot.press("tab")
        assert [r[0] for r in rows(app, "nodes")] == [live_name(0)]
        await pilot.press("p")  # all again
        count = str(app.query_one("#count", Static).render())
        assert count.startswith("80 of 80 shards, 20 of 20 nodes"), count

    drive(app, steps)


def help_shown(app: Console) -> str | None:
    """The help screen's text while it is open, else None."""
    if not isinstance(app.screen, HelpScreen):
        return None
    return str(app.screen.query_one("#help", Static).render())


def test_question_mark_and_h_list_every_key_and_escape_question_mark_or_q_close_it() -> None:
    app = console(live=20, dead=2)

    async def steps(pilot: Pilot[None]) -> None:
        for _ in range(100):  # the footer says how, once painted
            if "? help" in screen_text(app)[-1]:
                break
            await pilot.pause(0.05)
        assert "? help" in screen_text(app)[-1]
        for opens, closes in (("question_mark", "escape"), ("h", "question_mark"), ("h", "q")):
            await pilot.press(opens)
            shown = help_shown(app)
            assert shown == help_text(), opens
            said = " ".join(shown.split())
            assert all(" ".join(f"{key} {what}".split()) in said for key, what in KEYS)
            await pilot.press(closes)
            assert help_shown(app) is None, closes
            assert app.is_running  # `q` closed the list, not the console
        await pilot.press("q")
        assert not app.is_running

    drive(app, steps)


def test_the_help_names_every_key_the_console_binds_and_the_docs_table_is_it() -> None:
    listed = {k for key, _ in KEYS for k in key.split()}
    names = {"slash": "/", "question_mark": "?", "escape": "Escape"}
    for binding in Console.BINDINGS:
        assert isinstance(binding, Binding)
        for key in binding.key.split(","):
            assert names.get(key, key) in listed, key
    doc = (ROOT / "docs" / "consumers.md").read_text()
    table = doc.split("<!-- console-keys -->\n")[1].split("<!-- /console-keys -->")[0]
    rows_ = [line.strip("| ").split(" | ") for line in table.splitlines()[2:]]
    assert [(k.replace("`", "").replace(",", ""), w) for k, w in rows_] == list(KEYS)


def test_the_cursor_follows_its_row_across_a_re_sort() -> None:
    app = console(live=30, dead=2)

    async def steps(pilot: Pilot[None]) -> None:
        table = app.query_one("#shards", RowTable)
        await pilot.press("down", "down", "down")
        on = rows(app)[3][:2]
        assert table.cursor_row == 3 and table.cursor_key == "\x00".join(on)
        await pilot.press("o")  # by node: the row moves, the cursor with it
        order = [r[:2] for r in rows(app)]
        assert order.index(on) != 3
        assert table.cursor_row == order.index(on) and table.cursor_key == "\x00".join(on)
        await pilot.press("r")
        order = [r[:2] for r in rows(app)]
        assert table.cursor_row == order.index(on)
        await pilot.press("enter")  # the pane opens on that row
        detail = str(app.query_one("#detail-text", Static).render())
        assert detail.startswith(f"{on[0]} / {on[1]}   ")

    drive(app, steps)


def table_on_screen(app: Console) -> list[list[str]]:
    """The shards' rows the screen shows: node and shard of each line under the column names."""
    screen = screen_text(app)
    first = next(i for i, line in enumerate(screen) if line.split()[:2] == ["node", "shard"])
    return [line.split()[:2] for line in screen[first + 1 : -1] if line.strip()]


def test_at_10000_nodes_the_screen_shows_the_window_of_rows_under_the_cursor() -> None:
    app = console(live=10_000, dead=27)

    async def steps(pilot: Pilot[None]) -> None:
        table = app.query_one("#shards", RowTable)
        assert table.row_count == 40_108
        await pilot.press("end")
        window = table.window()
        assert table.cursor_row == 40_107 and window.stop == 40_108
        assert len(window) == table.size.height - 1  # a screen of rows, under the names
        shown = [list(table.cells_at(i)[:2]) for i in window]
        assert shown[-1] == [live_name(9999), "shard-03"]
        for _ in range(100):  # painted
            if table_on_screen(app) == shown:
                break
            await pilot.pause(0.05)
        assert table_on_screen(app) == shown
        await pilot.press("pageup")
        assert table.cursor_row == 40_107 - len(window)
        assert table.window().start == table.cursor_row
        await pilot.press("home")
        assert table.window().start == 0 and table.cursor_row == 0
        for _ in range(100):
            if table_on_screen(app)[0] == [live_name(0), "shard-01"]:
                break
            await pilot.pause(0.05)
        assert table_on_screen(app)[:2] == [[live_name(0), "shard-01"], [live_name(71), "shard-01"]]

    drive(app, steps)
