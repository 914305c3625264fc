"""The comparison report's across-seeds section: repeated sweep points read as a mean with
its interval, and a ratio paired by seed that says "differs" only for a consistent gap."""

from __future__ import annotations

from pathlib import Path

from experiments.output.results import Run
from experiments.output.seeds import by_point, figures, paired_ratio, seed_lines


def run(label: str, seed: int, ttft_p50: float, count: int = 40) -> Run:
    stats = {"count": count, "p50": ttft_p50, "p99": ttft_p50 * 2}
    summary = {"label": f"{label},seed={seed}", "seed": seed, "metrics": {"ttft_ms": stats}}
    return Run(path=Path(f"/nowhere/{label}-{seed}"), summary=summary)


def table(lines: list[str], title: str) -> list[str]:
    start = lines.index(title)
    end = lines.index("", start + 2)
    return lines[start + 4 : end]


def test_runs_group_by_their_label_without_the_seed_in_first_seen_order():
    runs = [run("router=a", 1, 10), run("router=b", 1, 5), run("router=a", 2, 11)]
    points = by_point(runs)
    assert list(points) == ["router=a", "router=b"]
    assert [r.summary["seed"] for r in points["router=a"]] == [1, 2]


def test_a_p99_the_sample_cannot_support_is_left_out_of_the_figures():
    assert ("TTFT p99", "ms") not in figures(run("x", 1, 10, count=40))
    assert figures(run("x", 1, 10, count=400))[("TTFT p99", "ms")] == 20


def test_a_consistent_halving_differs_and_seed_noise_does_not():
    base = {1: 100.0, 2: 120.0, 3: 80.0}
    halved = {s: v / 2 for s, v in base.items()}
    ci = paired_ratio(halved, base)
    assert ci is not None and abs(ci.estimate - 0.5) < 1e-9 and ci.excludes_one
    noisy = {1: 120.0, 2: 100.0, 3: 85.0}  # ratios 1.2, 0.83, 1.06: no consistent gap
    ci = paired_ratio(noisy, base)
    assert ci is not None and not ci.excludes_one


def test_the_section_gives_each_point_its_mean_interval_and_verdict():
    runs = [run("router=blind", s, v) for s, v in ((1, 100), (2, 120), (3, 80))]
    runs += [run("router=aware", s, v) for s, v in ((1, 50), (2, 61), (3, 39))]
    lines = seed_lines(runs)
    rows = table(lines, "**TTFT p50 (ms)**")
    assert rows[0].startswith("| router=blind | 3 | 100, 120, 80 | 100 |")
    assert "| 50.31 – 149.7 |" in rows[0]  # 100 ± t(2) 4.303 × sd 20 / √3
    assert rows[1].startswith("| router=aware | 3 | 50, 61, 39 | 50 |")
    assert rows[1].endswith(": differs |")


def test_nothing_is_added_when_every_point_ran_once():
    assert seed_lines([run("router=a", 1, 10), run("router=b", 1, 5)]) == []
