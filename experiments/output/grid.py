"""A small table for a screen redrawn every second: laid out by hand, drawn as rich
renders it.

    Grid("Hottest links (of 8)", ("port", "Mbit/s"), rows, right=(1,))

draws what ``rich.table.Table(title=..., box=box.SIMPLE_HEAD, show_edge=False)`` draws
for these cells (an italic title, a bold header, a rule under it, columns three spaces
apart; ``edge``: one space of padding at either edge; ``rule=False``: no header, no rule,
columns two spaces apart, as ``box=None``) at a tenth of the cost: a rich ``Table``
measures every cell through its whole renderable protocol, about 3 ms of CPU per small
table on a busy two-core machine, which made tables most of what ``kvfabric run --live``
cost the run it watches (``benchmarks/agent_cost.py``). Cells are one line of text
(``str`` or a styled ``rich.text.Text``); the ``give_way`` column (at most ``max_give``
cells wide) is the one cut short, with an ellipsis, when the terminal is narrower; a line
still too long is cropped at the terminal's edge.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.segment import Segment
from rich.style import Style
from rich.text import Text

Cell = str | Text

TITLE, HEADER = Style(italic=True), Style(bold=True)


class Grid:
    """See the module docstring."""

    def __init__(
        self,
        title: str,
        header: Sequence[str] | None,
        rows: Iterable[Sequence[Cell]],
        right: Sequence[int] = (),
        edge: bool = False,
        give_way: int | None = None,
        max_give: int | None = None,
    ) -> None:
        self.title, self.header = title, header
        self.rows = [[c if isinstance(c, Text) else Text(c) for c in row] for row in rows]
        self.right, self.edge = set(right), edge
        self.give_way, self.max_give = give_way, max_give

    def widths(self, max_width: int) -> list[int]:
        """Each column's width for a terminal ``max_width`` cells wide."""
        n = len(self.header) if self.header else max((len(r) for r in self.rows), default=0)
        widths = [cell_len(self.header[i]) if self.header else 0 for i in range(n)]
        for row in self.rows:
            for i, cell in enumerate(row):
                widths[i] = max(widths[i], cell.cell_len)
        if self.give_way is not None and n:
            i = self.give_way
            if self.max_give is not None:
                widths[i] = min(widths[i], self.max_give)
            over = self._span(widths) - max_width
            if over > 0:
                widths[i] = max(1, widths[i] - over)
        return widths

    def _span(self, widths: list[int]) -> int:
        gap = 3 if self.header else 2
        return sum(widths) + gap * max(0, len(widths) - 1) + (2 if self.edge else 0)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        widths = self.widths(options.max_width)
        span = min(self._span(widths), options.max_width)
        gap = "   " if self.header else "  "
        edge = " " if self.edge else ""
        lines: list[list[Segment]] = [[Segment(self.title.ljust(span), TITLE)]]
        if self.header:
            cells = [Text(h, style=HEADER) for h in self.header]
            lines.append(self._line(cells, widths, gap, edge, console))
            lines.append([Segment("─" * span)])
        lines += [self._line(row, widths, gap, edge, console) for row in self.rows]
        for line in lines:
            yield from Segment.adjust_line_length(line, span)
            yield Segment.line()

    def _line(
        self, cells: Sequence[Text], widths: list[int], gap: str, edge: str, console: Console
    ) -> list[Segment]:
        out = [Segment(edge)] if edge else []
        for i, (cell, width) in enumerate(zip(cells, widths, strict=False)):
            if i:
                out.append(Segment(gap))
            if cell.cell_len > width:
                cell = cell.copy()
                cell.truncate(width, overflow="ellipsis")
            pad = " " * (width - cell.cell_len)
            if i in self.right:
                out.append(Segment(pad))
            style = console.get_style(cell.style) if isinstance(cell.style, str) else cell.style
            out.extend(Segment.apply_style(cell.render(console), style))
            if i not in self.right:
                out.append(Segment(pad))
        if edge:
            out.append(Segment(edge))
        return out
