"""A Textual app's screen as text, as a terminal shows it: from its own SVG screenshot, each
piece of text put at its line and column (Rich draws a cell 12.2 units wide)."""

from __future__ import annotations

import html
import re

from textual.app import App

CELL = 12.2
_TEXT = re.compile(
    r'<text[^>]*\bx="([\d.]+)"[^>]*clip-path="url\(#[\w-]+-line-(\d+)\)"[^>]*>(.*?)</text>'
)


def screen_text(app: App[None]) -> list[str]:
    """The screen's lines, trailing blanks cut."""
    lines: dict[int, list[str]] = {}
    for x, line, text in _TEXT.findall(app.export_screenshot()):
        row = lines.setdefault(int(line), [])
        column = round(float(x) / CELL)
        row.extend(" " * (column - len(row)))
        for i, char in enumerate(html.unescape(text).replace("\xa0", " ")):
            if column + i < len(row):
                row[column + i] = char
            else:
                row.append(char)
    return ["".join(lines.get(i, [])).rstrip() for i in range(max(lines, default=-1) + 1)]
