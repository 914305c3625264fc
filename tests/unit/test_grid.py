"""The live view's tables (``experiments.output.grid``): what a rich ``Table`` draws for
the same cells, and a detail that gives way in a narrow terminal."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from experiments.output.grid import Grid

ROWS = [("leaf0→spine1", "36", Text("90 %", style="bold red")), ("spine0→leaf12", "4", "10 %")]


def drawn(renderable, width: int = 100) -> str:
    console = Console(record=True, width=width, force_terminal=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def test_a_grid_reads_as_the_rich_table_it_stands_for():
    table = Table(
        title="Hottest links (of 2)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        show_edge=False,
    )
    table.add_column("port", no_wrap=True)
    for name in ("Mbit/s", "% capacity"):
        table.add_column(name, justify="right", no_wrap=True)
    for row in ROWS:
        table.add_row(*row)
    grid = Grid("Hottest links (of 2)", ("port", "Mbit/s", "% capacity"), ROWS, right=(1, 2))
    assert drawn(grid) == drawn(table)
    assert drawn(grid).splitlines()[3].split() == ["leaf0→spine1", "36", "90", "%"]


def test_the_detail_gives_way_in_a_narrow_terminal():
    detail = "p95 of machine CPU over 60 samples, max 70%; busiest core p95 90%"
    rows = [("cpu", "ok", "p95 45 % (≤ 90)", detail)]
    grid = Grid("Fidelity", ("check", "status", "measured", "detail"), rows, edge=True, give_way=3)
    wide = drawn(grid, width=120)
    assert detail in wide
    narrow = drawn(grid, width=50).splitlines()
    assert max(len(line) for line in narrow) <= 50
    cpu = [line for line in narrow if "cpu" in line][0]
    assert "p95 45 % (≤ 90)" in cpu and cpu.rstrip().endswith("…")
    capped = Grid("F", ("check", "detail"), [("cpu", detail)], give_way=1, max_give=20)
    assert max(len(line) for line in drawn(capped).splitlines()) <= len("check") + 3 + 20
