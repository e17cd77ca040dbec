"""A table of fixed columns that draws only the rows on the screen: the console's shards and
nodes, 40,000 rows at 10,000 nodes.

It holds the rows in their order as they are (a ShardRow, a NodeRow) with a key each, and
makes a row's cells only when the row is drawn, a line at a time (Textual's line API): a
re-sort hands it a new order and the next frame draws the fifty rows on the screen, where a
DataTable lays out every cell it holds (100 rows were 70 ms of a key at 10,000 nodes). The
cursor is on a key: it follows its row to where a new order puts it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Generic, TypeVar

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Region
from textual.message import Message
from textual.strip import Strip
from textual.widget import Widget

Item = TypeVar("Item")
Styled = Callable[[str, str], str]
"""A cell's style (a Rich style's text, "" for none) from its column and its text."""


class RowTable(Widget, Generic[Item], can_focus=True):
    """`columns`: each column's name and width; `cells` makes a row's cells' text, one a
    column; `styled` a cell's style. The first line says the columns; a click on one posts
    HeaderSelected, Enter on a row (or a click) Selected."""

    DEFAULT_CSS = """
    RowTable { height: 1fr; }
    RowTable > .row-table--header { text-style: bold; background: $panel; }
    RowTable > .row-table--even { background: $surface-lighten-1; }
    RowTable > .row-table--cursor { background: $block-cursor-background;
                                    color: $block-cursor-foreground; text-style: bold; }
    """
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "row-table--header",
        "row-table--even",
        "row-table--cursor",
    }
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "move(-1)", show=False),
        Binding("down", "move(1)", show=False),
        Binding("pageup", "page(-1)", show=False),
        Binding("pagedown", "page(1)", show=False),
        Binding("home", "move(-1_000_000_000)", show=False),
        Binding("end", "move(1_000_000_000)", show=False),
        Binding("enter", "select", show=False),
    ]

    class Selected(Message):
        """Enter (or a click) on a row: its key."""

        def __init__(self, table: RowTable[Any], key: str) -> None:
            super().__init__()
            self.table = table
            self.key = key

    class HeaderSelected(Message):
        """A click on a column's name: its index."""

        def __init__(self, table: RowTable[Any], column: int) -> None:
            super().__init__()
            self.table = table
            self.column = column

    def __init__(
        self,
        columns: Sequence[tuple[str, int]],
        cells: Callable[[Item], tuple[str, ...]],
        key: Callable[[Item], str],
        styled: Styled = lambda _column, _text: "",
        *,
        id: str | None = None,
    ) -> None:
        super().__init__(id=id)
        self.columns = tuple(columns)
        self._cells = cells
        self._key = key
        self._styled = styled
        self.items: Sequence[Item] = ()
        self.cursor_row = 0
        """The index of the row under the cursor."""
        self.top = 0
        """The index of the first row on the screen."""

    @property
    def row_count(self) -> int:
        return len(self.items)

    @property
    def cursor_key(self) -> str | None:
        """The key of the row under the cursor; None in an empty table."""
        return self._key(self.items[self.cursor_row]) if self.items else None

    def cells_at(self, index: int) -> tuple[str, ...]:
        """The cells' text of the row at `index` of the order, as drawn."""
        return self._cells(self.items[index])

    def window(self) -> range:
        """The indices of the rows on the screen."""
        return range(self.top, min(self.top + self._page(), len(self.items)))

    def show(self, items: Sequence[Item]) -> None:
        """Hold `items` in this order, the cursor on the row it was on where that row is
        still there (else at the same index), and draw the rows on the screen."""
        at = self.cursor_key
        self.items = items
        index = self.cursor_row
        if at is not None and (index >= len(items) or self._key(items[index]) != at):
            index = next((i for i, item in enumerate(items) if self._key(item) == at), index)
        self._place(index, follow=True)
        self.refresh()

    def action_move(self, by: int) -> None:
        self._place(self.cursor_row + by)

    def action_page(self, by: int) -> None:
        self._place(self.cursor_row + by * self._page())

    def action_select(self) -> None:
        if self.items:
            self.post_message(self.Selected(self, self._key(self.items[self.cursor_row])))

    def _page(self) -> int:
        return max(self.size.height - 1, 1)

    def _place(self, index: int, *, follow: bool = False) -> None:
        """The cursor at `index` (within the rows), the window moved to show it: by the
        least where the cursor moved, centred where it followed its row far away."""
        index = max(min(index, len(self.items) - 1), 0)
        page, top = self._page(), self.top
        if not top <= index < top + page:
            top = index - page // 2 if follow else (index if index < top else index - page + 1)
        top = max(min(top, len(self.items) - page), 0)
        if top != self.top:
            self.top = top
            self.refresh()
        elif index != self.cursor_row:
            for row in (self.cursor_row, index):  # the two lines alone
                self.refresh(Region(0, row - top + 1, self.size.width, 1))
        self.cursor_row = index

    def on_resize(self, _: events.Resize) -> None:
        self._place(self.cursor_row)

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        event.stop()
        self._scroll(3)

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        event.stop()
        self._scroll(-3)

    def _scroll(self, by: int) -> None:
        top = max(min(self.top + by, len(self.items) - self._page()), 0)
        if top != self.top:
            self.top = top
            self.cursor_row = max(min(self.cursor_row, top + self._page() - 1), top)
            self.refresh()

    def on_click(self, event: events.Click) -> None:
        if event.y == 0:
            x = 0
            for i, (_, width) in enumerate(self.columns):
                x += width + 2
                if event.x < x:
                    self.post_message(self.HeaderSelected(self, i))
                    return
        elif self.top + event.y - 1 < len(self.items):
            self._place(self.top + event.y - 1)
            self.action_select()

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if y == 0:
            names = tuple(name for name, _ in self.columns)
            style = self.get_component_rich_style("row-table--header")
            return self._strip(names, style, width, plain=True)
        index = self.top + y - 1
        if index >= len(self.items):
            return Strip.blank(width, self.rich_style)
        if index == self.cursor_row:
            base = self.get_component_rich_style("row-table--cursor")
        elif index % 2:
            base = self.get_component_rich_style("row-table--even")
        else:
            base = self.rich_style
        return self._strip(self._cells(self.items[index]), base, width)

    def _strip(
        self, cells: Sequence[str], base: Style, width: int, *, plain: bool = False
    ) -> Strip:
        segments = []
        for (column, size), cell in zip(self.columns, cells, strict=True):
            text = cell if len(cell) <= size else cell[: size - 1] + "…"
            said = "" if plain else self._styled(column, text)
            style = base + Style.parse(said) if said else base
            segments.append(Segment(f" {text.ljust(size)} ", style))
        return Strip(segments).crop_extend(0, width, base)
