"""The console's keys, said in full where the footer has a word for each: `?` (and `h`, as
nvitop and k9s users press it) opens a screen that lists them; Escape, `?` or `q` close it.
"""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import ModalScreen
from textual.widgets import Static

KEYS: tuple[tuple[str, str], ...] = (
    ("/", "filter with globs on node, shard, engine or verdict (`gpu-00*`, `fallback`; "
     "`node:GLOB`, `verdict:GLOB` for one field; terms separated by spaces all match); "
     "Enter applies it"),
    ("Escape", "close the filter or the shard's pane; else clear the filter"),
    ("Enter", "open the shard under the cursor: its reason, evidence, placement, GPUs, "
     "verdicts as this console saw them, and the doctor command for its node"),
    ("tab", "the shards or the nodes, those that need a person first"),
    ("o", "sort by the next column (after the last: problems first again)"),
    ("r", "reverse the order"),
    ("p", "only what needs a person: those shards, and the nodes that are or hold one"),
    ("? h", "this list of keys"),
    ("q", "quit"),
)  # fmt: skip
"""Each key as a person presses it, and what it does."""


def help_text() -> str:
    """The keys as the help screen shows them: one a line, the key in a column of its own."""
    width = max(len(key) for key, _ in KEYS)
    lines = [f"{key:<{width}}  {what}" for key, what in KEYS]
    return "\n".join(["Keys", "", *lines, "", "Escape, ? or q closes this."])


class HelpScreen(ModalScreen[None]):
    """Every key and what it does, over the console until closed."""

    CSS = """
    HelpScreen { align: center middle; }
    #help { width: 90%; max-width: 110; height: auto; border: round $accent;
            background: $panel; padding: 1 2; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,question_mark,q,h", "dismiss", "close"),
    ]

    def compose(self) -> ComposeResult:
        yield Static(help_text(), id="help", markup=False)
