"""PURE: the summary's chart and tables drawn as ``rich`` draws them, without importing it.

Importing ``rich.console`` and ``rich.table`` (~40 ms) and laying the tables out (25-45 ms)
were a fifth of a ~300 ms ``autoretry diagnose``. The summary needs little of rich: cells of
plain ASCII text that fit the width, two boxes (``ASCII2`` without colour, ``SIMPLE_HEAD``
with), a bold header and red or green bars. :func:`draw` writes exactly the characters
rich's ``Console`` writes for these grids (the tests compare the two byte for byte) and says
``None`` where it could not be sure to: a grid wider than the width (rich would shrink or
wrap its columns), a cell that is not printable ASCII (rich measures wide and combining
characters, expands tabs, splits lines), or Windows (rich's legacy console draws in one
column fewer). The caller then draws with rich, so what is printed is always what rich
prints.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

#: The colour chart's bar: rich counts it one column (East Asian "ambiguous": not wide).
BAR = "█"
#: The SGR codes rich's "standard" colour system writes for the styles the summary uses.
SGR = {"bold": "1", "red": "31", "green": "32"}
#: rich's default theme draws a table's header bold.
HEADER_STYLE = "bold"
#: Where the first box line, the header separator and the last box line come from:
#: ``(left, horizontal, cross, right)`` for rich's ``ASCII2`` and ``SIMPLE_HEAD`` boxes.
ASCII2_RULE = ("+", "-", "+", "+")
SIMPLE_HEAD_TOP = (" ", " ", " ", " ")
SIMPLE_HEAD_RULE = (" ", "─", "─", " ")
ASCII2_WALLS = ("|", "|", "|")  # a row's left edge, column separator, right edge
SIMPLE_HEAD_WALLS = (" ", " ", " ")


@dataclass(frozen=True)
class Column:
    """A column as rich's ``Table.add_column`` takes it (``no_wrap`` matters only to rich:
    it shrinks a table too wide for the width, which ``draw`` leaves to it)."""

    header: str
    justify: Literal["left", "right"] = "left"
    min_width: int | None = None
    no_wrap: bool = False


@dataclass(frozen=True)
class Cell:
    """A cell's text and the colour of its text (``""``: none), as rich's ``Text(text,
    style=colour)``."""

    text: str
    colour: str = ""


@dataclass(frozen=True)
class Grid:
    """A table as the summary builds it. ``framed``: a boxed table with a header and
    padding on its edges (the breakdowns); otherwise no box, no header and no padding on
    the outer edges (the chart)."""

    columns: tuple[Column, ...]
    rows: tuple[tuple[Cell, ...], ...]
    framed: bool


#: What a cell may hold: printable ASCII and the chart's bar, each one column wide.
DRAWABLE = frozenset(map(chr, range(0x20, 0x7F))) | {BAR}


def _drawable(text: str) -> bool:
    """Characters one column wide that rich writes as they are, nothing it measures,
    expands or splits apart."""
    return frozenset(text) <= DRAWABLE


def _paddings(grid: Grid) -> list[tuple[int, int]]:
    """Each column's (left, right) padding: rich's ``padding=(0, 1)``, without the outer
    edges' unless ``pad_edge`` (the framed tables)."""
    pads = [(1, 1) for _ in grid.columns]
    if not grid.framed and pads:
        pads[0] = (0, pads[0][1])
        pads[-1] = (pads[-1][0], 0)
    return pads


def _widths(grid: Grid, pads: Sequence[tuple[int, int]]) -> list[int]:
    """Each column's width with its padding: its widest cell (its header's, if framed),
    at least ``min_width`` and at least 1, as rich measures a column that needs no
    shrinking."""
    widths = []
    for index, (column, (left, right)) in enumerate(zip(grid.columns, pads, strict=True)):
        texts = [row[index].text for row in grid.rows]
        if grid.framed:
            texts.append(column.header)
        widest = max((len(t) for t in texts), default=0) + left + right
        if column.min_width is not None:
            widest = max(widest, column.min_width + left + right)
        widths.append(widest or 1)
    return widths


def _paint(text: str, style: str, colour: bool) -> str:
    """A segment as rich writes it: codes around non-empty text, one style at a time."""
    if not (colour and style and text):
        return text
    return f"\x1b[{SGR[style]}m{text}\x1b[0m"


def _cell(cell: Cell, justify: str, width: int, pad: tuple[int, int], style: str,
          colour: bool) -> str:
    """One cell: its padding in the cell's style (the header's bold), its text justified
    in the rest, in the cell's style or else its text's colour."""
    inner = width - pad[0] - pad[1]
    text = cell.text.rjust(inner) if justify == "right" else cell.text.ljust(inner)
    return (_paint(" " * pad[0], style, colour) + _paint(text, style or cell.colour, colour)
            + _paint(" " * pad[1], style, colour))


def _rule(widths: Sequence[int], parts: tuple[str, str, str, str]) -> str:
    left, horizontal, cross, right = parts
    return left + cross.join(horizontal * w for w in widths) + right


def _row(cells: Sequence[Cell], grid: Grid, widths: Sequence[int],
         pads: Sequence[tuple[int, int]], style: str, colour: bool) -> str:
    drawn = [_cell(cell, column.justify, width, pad, style, colour)
             for cell, column, width, pad in zip(cells, grid.columns, widths, pads, strict=True)]
    if not grid.framed:
        return "".join(drawn)
    left, between, right = ASCII2_WALLS if not colour else SIMPLE_HEAD_WALLS
    return left + between.join(drawn) + right


def _lines(grid: Grid, widths: Sequence[int], colour: bool) -> list[str]:
    pads = _paddings(grid)
    rows = [_row(cells, grid, widths, pads, "", colour) for cells in grid.rows]
    if not grid.framed:
        return rows
    top, rule = (SIMPLE_HEAD_TOP, SIMPLE_HEAD_RULE) if colour else (ASCII2_RULE, ASCII2_RULE)
    header = tuple(Cell(column.header) for column in grid.columns)
    return [_rule(widths, top), _row(header, grid, widths, pads, HEADER_STYLE, colour),
            _rule(widths, rule), *rows, _rule(widths, top)]


def _fits(grid: Grid, widths: Sequence[int], width: int) -> bool:
    """Whether rich lays ``grid`` out at its natural widths: the columns and the box's
    edges and separators within the console's width."""
    edges = len(grid.columns) + 1 if grid.framed else 0
    return sum(widths) <= width - edges


def draw(grids: Sequence[Grid], colour: bool, width: int) -> str | None:
    """What ``Console(width=width)`` writes printing ``grids`` one after the other (with
    ``color_system="standard"`` when ``colour``, else none), or ``None`` where it may
    write something else."""
    if sys.platform == "win32":
        return None
    lines: list[str] = []
    for grid in grids:
        cells = [c.text for row in grid.rows for c in row] + [c.header for c in grid.columns]
        widths = _widths(grid, _paddings(grid))
        if not all(map(_drawable, cells)) or not _fits(grid, widths, width):
            return None
        lines += _lines(grid, widths, colour)
    return "".join(line + "\n" for line in lines)
