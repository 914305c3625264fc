"""What ``kvfabric run --live`` shows: a snapshot of the run so far, as a rich renderable.

    screen = live_view(snapshot)            # a rich Group of tables; pure, no I/O

A ``LiveSnapshot`` is plain data (``experiments.analysis.standing`` defines it and builds
it from what the run has recorded so far; ``experiments.orchestration.live_view`` puts it
on the screen). The screen has, in this order:

- a header: the run, what it is doing, the time elapsed of its duration;
- the hottest queues and, beside them, the hottest links (so that the screen fits a
  24-line terminal):

- the hottest queues: backlog now and the recent peak in packets, the peak in % of the
  port's buffer, drops so far; ports named by their neighbour (``leaf0→spine1``);
- the hottest links: the egress rate over the last samples in Mbit/s and in % of the
  port's shaped capacity;
- traffic: flows in flight / settled / failed, requests in flight / done / failed (a
  serving workload), TTFT and ITL p50 and p99 so far with their count;
- each fidelity check as it stands: ``ok``, ``at risk`` (within 20 % of its limit),
  ``failing``, or ``pending`` (no evidence yet, or judged only at the end).

Rates and times are wall-clock: at a time dilation d the run's tables are converted to
real-equivalent units only at its end.
"""

from __future__ import annotations

from collections.abc import Iterable

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.segment import Segment
from rich.text import Text

from experiments.analysis.standing import (
    CheckStanding,
    Latency,
    LinkLoad,
    LiveSnapshot,
    QueueLoad,
    Traffic,
)
from experiments.output.grid import Cell, Grid

TOP = 5  # rows of the hottest queues and links
STATUS_STYLE = {"ok": "green", "at risk": "yellow", "failing": "bold red", "pending": "dim"}


def live_view(s: LiveSnapshot, top: int = TOP) -> RenderableType:
    """The screen for snapshot ``s``: a header, then the tables that have rows."""
    parts: list[RenderableType] = [_header(s)]
    loads = [_queues(s.queues, top)] if s.queues else []
    loads += [_links(s.links, top)] if s.links else []
    if loads:
        parts.append(_SideBySide(loads))
    parts.append(_traffic(s.traffic))
    if s.checks:
        parts.append(_checks(s.checks))
    if s.note:
        parts.append(Text(s.note, style="dim"))
    return Group(*parts)


class _SideBySide:
    """Tables side by side where the terminal is wide enough (so the screen fits a
    24-line terminal), one under the other where it is not. Each table is rendered once,
    at its own width, and its lines laid beside the others' (a rich grid of tables would
    measure every table, then render it again: twice the work, on every redraw)."""

    GAP = 2

    def __init__(self, tables: list[Grid]) -> None:
        self.tables = tables

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        rendered = [console.render_lines(t, options, pad=False) for t in self.tables]
        widths = [Segment.get_shape(lines)[0] for lines in rendered]
        if sum(widths) + self.GAP * (len(widths) - 1) > options.max_width:
            rows: Iterable[tuple[list[Segment], ...]] = ((line,) for t in rendered for line in t)
        else:
            height = max(len(lines) for lines in rendered)
            shaped = [
                Segment.set_shape(lines, w, height)
                for lines, w in zip(rendered, widths, strict=True)
            ]
            rows = zip(*shaped, strict=True)
        gap = Segment(" " * self.GAP)
        for row in rows:
            for i, line in enumerate(row):
                if i:
                    yield gap
                yield from line
            yield Segment.line()


def _header(s: LiveSnapshot) -> Text:
    text = Text.assemble((s.run, "bold"), f": {s.phase}")
    if s.elapsed_s is not None:
        of = f" of {s.duration_s:.1f} s" if s.duration_s else ""
        text.append(f"  {s.elapsed_s:.1f} s{of}", style="cyan")
    return text


def _queues(queues: tuple[QueueLoad, ...], top: int) -> Grid:
    hottest = sorted(queues, key=lambda q: (-q.peak_pkts, -q.backlog_pkts, q.port))[:top]
    return _hottest(
        f"Hottest queues, packets (of {len(queues)})",
        ("now", "peak", "% buffer", "drops"),
        (
            (
                q.port,
                f"{q.backlog_pkts}",
                f"{q.peak_pkts}",
                _percent(q.peak_pct),
                Text(f"{q.drops}", style="red" if q.drops else ""),
            )
            for q in hottest
        ),
    )


def _links(links: tuple[LinkLoad, ...], top: int) -> Grid:
    hottest = sorted(links, key=lambda k: (-(k.pct or 0.0), -k.mbps, k.port))[:top]
    return _hottest(
        f"Hottest links (of {len(links)})",
        ("Mbit/s", "% capacity"),
        ((k.port, figure(k.mbps), _percent(k.pct)) for k in hottest),
    )


def _hottest(title: str, figures: tuple[str, ...], rows: Iterable[tuple[Cell, ...]]) -> Grid:
    """A table of the hottest ports: each port, then its ``figures`` right-aligned."""
    return Grid(title, ("port", *figures), rows, right=range(1, len(figures) + 1))


def _percent(pct: float | None) -> Cell:
    return "—" if pct is None else Text(f"{pct:.0f} %", style=_load_style(pct))


def _traffic(tr: Traffic) -> Grid:
    rows = [
        (
            "flows",
            f"{tr.flows_in_flight} in flight, {tr.flows_settled} settled"
            + (f", {tr.flows_failed} failed" if tr.flows_failed else ""),
        )
    ]
    if tr.requests_total is not None:
        rows += [
            (
                "requests",
                f"{tr.requests_in_flight} in flight, {tr.requests_done} done of "
                f"{tr.requests_total}"
                + (f", {tr.requests_failed} failed" if tr.requests_failed else ""),
            ),
            ("TTFT", _latency(tr.ttft)),
            ("ITL", _latency(tr.itl)),
        ]
    return Grid("Traffic so far", None, rows, edge=True)


def _latency(lat: Latency) -> str:
    if not lat.n or lat.p50_ms is None or lat.p99_ms is None:
        return "n=0"
    return f"p50 {figure(lat.p50_ms)} ms, p99 {figure(lat.p99_ms)} ms (n={lat.n})"


def _checks(checks: tuple[CheckStanding, ...]) -> Grid:
    rows = [
        (c.name, Text(c.status, style=STATUS_STYLE.get(c.status, "")), c.measured, c.detail)
        for c in checks
    ]
    header = ("check", "status", "measured", "detail")
    # the detail gives way, one line each
    return Grid("Fidelity as it stands", header, rows, edge=True, give_way=3, max_give=60)


def figure(x: float) -> str:
    """Three significant digits, never in e-notation: 0.0123, 1.23, 158, 1580."""
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _load_style(pct: float) -> str:
    return "bold red" if pct >= 90 else "yellow" if pct >= 60 else ""
