"""``kvfabric bmwg compare DIR…``: several fabrics' bmwg results side by side. Several
results of one fabric (its tests run in parts) make one column; a test run again
later on the same fabric (``bmwg-<timestamp>``) supersedes the earlier result of it,
and the comparison names both.

One table per test: a row per (point, KPI), a column per fabric holding the mean over
its faithful runs with its 95 % interval (Student's t over seeds) and n; then, for
every fabric after the first, its ratio to the first fabric paired by seed, with a 95 %
interval and whether that interval excludes 1 (``ratio_verdict``).

Paired by seed because a seed drives the same arrivals, sizes and tie-breaks on every
fabric: each seed both fabrics ran gives one ratio, and the interval is Student's t over
those ratios (``output.seeds.paired_ratio``, as a sweep's points are compared). Not a
bootstrap over each side's runs: with the 2 runs of a quick point, resampling 2 values
gives 3 possible means a side, and the interval it draws is far too narrow (it said
"differs" where the two fabrics' own t intervals overlapped). With 2 seeds t has one
degree of freedom (12.7): only a large, consistent difference is called one, and a
"no difference detected" says little. Below 2 shared seeds there is no interval.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.bmwg.aggregate import by_point, counted
from experiments.bmwg.catalog import BY_ID
from experiments.bmwg.report import interval_text
from experiments.output.formatting import fmt
from experiments.output.ratios import ratio_verdict
from experiments.output.seeds import paired_ratio

# a difference whose whole interval lies within this of 1 is said to be small: with
# seeds that drive the same arrivals on both fabrics, two nearly equal ratios give an
# interval that excludes 1 for a 0.1 % difference (computed parts, such as a TTFT's
# prefill, are the same on every fabric)
SMALL = 0.05


@dataclass(frozen=True)
class Suite:
    name: str  # the fabric's
    plan: dict[str, Any]
    rows: list[dict[str, Any]]
    source: str = ""  # its directory, bmwg-<YYYYmmdd-HHMMSS>: later sorts after
    superseded: tuple[str, ...] = ()  # "test: newer supersedes older", merged results


def read_suite(path: Path) -> Suite:
    """A ``bmwg-<timestamp>`` directory's plan and rows (``ValueError`` if it is not one)."""
    plan_file, suite_file = path / "plan.json", path / "suite.json"
    if not plan_file.is_file() or not suite_file.is_file():
        raise ValueError(f"{path} is not a kvfabric bmwg result (no plan.json / suite.json)")
    plan = json.loads(plan_file.read_text())
    suite = json.loads(suite_file.read_text())
    # an interrupted suite: only the tests it ran in full (the rest can be run again)
    cut = {name.split()[0] for name in suite.get("not_run") or []}
    tests = [t for t in suite.get("tests", plan["tests"]) if t not in cut]
    rows = [r for r in suite["rows"] if r["test"] in tests]
    return Suite(plan["fabric"]["name"], {**plan, "tests": tests}, rows, path.name)


def by_fabric(suites: Sequence[Suite]) -> list[Suite]:
    """One ``Suite`` per fabric, in first-seen order: a datasheet run a few tests at a
    time (``bmwg run 5.1 5.2 …`` now, ``bmwg run 8.1 …`` in another session) reads as one
    column, and a test in two results of one fabric is taken from the later one (by
    ``source``), said in ``superseded``. ``ValueError`` if two results of one fabric
    name differ in the fabric itself or in the profile (their intervals would not mean
    the same), or hold a test and cannot be told apart in time."""
    order = list(dict.fromkeys(s.name for s in suites))
    merged = []
    for name in order:
        mine = sorted((s for s in suites if s.name == name), key=lambda s: s.source)
        first = mine[0]
        tests: dict[str, Suite] = {}
        said: list[str] = []
        for s in mine:
            for key in ("fabric", "profile"):
                if first.plan[key] != s.plan[key]:
                    raise ValueError(f"two results of fabric {name!r} differ in their {key}")
            for test in s.plan["tests"]:
                old = tests.get(test)
                if old is not None:
                    if old.source == s.source:
                        raise ValueError(
                            f"fabric {name!r}: test {test} is in two results of the same "
                            "time: keep one"
                        )
                    said.append(f"{test}: {s.source} supersedes {old.source}")
                tests[test] = s
        rows = [r for t, s in tests.items() for r in s.rows if r["test"] == t]
        plan = {**first.plan, "tests": list(tests)}
        merged.append(Suite(name, plan, rows, first.source, tuple(said)))
    return merged


def _cell(cell: Mapping[str, Any] | None) -> str:
    if not cell:
        return "–"
    value, ci = interval_text(cell)
    return f"{value} [{ci}] n={cell['n']}"


def per_seed(point: Mapping[str, Any] | None, column: str) -> dict[int, float]:
    """One KPI at one point as ``{seed: value}`` (a seed counted twice: their mean)."""
    if not point or column not in point["values"]:
        return {}
    pairs: dict[int, list[float]] = {}
    for seed, value in zip(point.get("seeds", []), point["values"][column], strict=True):
        if seed is not None and value is not None and value == value:
            pairs.setdefault(int(seed), []).append(float(value))
    return {seed: sum(vs) / len(vs) for seed, vs in pairs.items()}


def ratio_cell(a: Mapping[int, float], b: Mapping[int, float]) -> str:
    """Mean over the seeds both ran of ``a[seed] ÷ b[seed]`` with its 95 % t interval,
    n (the seeds paired) and verdict; "–" below 2 paired seeds."""
    ci = paired_ratio(dict(a), dict(b))
    if ci is None:
        return "–"
    verdict = ratio_verdict(ci.excludes_one)
    if ci.excludes_one and ci.low >= 1 - SMALL and ci.high <= 1 + SMALL:
        verdict += f", by under {SMALL * 100:g} %"
    if ci.low == ci.high:  # every seed gave the same ratio: t has no spread to widen
        verdict += " (no spread between seeds)"
    return f"{fmt(ci.estimate)} [{fmt(ci.low)} – {fmt(ci.high)}] n={ci.n} {verdict}"


def dilations(rows: Sequence[Mapping[str, Any]], test: str) -> dict[str, tuple[float, ...]]:
    """Each point of ``test``: the time dilations its counted runs ran at."""
    out: dict[str, set[float]] = {}
    for r in rows:
        if r["test"] == test and counted(r) and r.get("time_dilation") is not None:
            out.setdefault(str(r["point"]), set()).add(float(r["time_dilation"]))
    return {p: tuple(sorted(ds)) for p, ds in out.items()}


def mixed_dilations(suites: Sequence[Suite], test: str) -> list[str]:
    """The points of ``test`` the fabrics ran at different time dilations, as
    ``point (fabric d, …)``: there a ratio mixes the fabrics with the emulator's own
    per-message cost, which d divides."""
    per = [dilations(s.rows, test) for s in suites]
    found = []
    for point in dict.fromkeys(p for d in per for p in d):
        seen = [(s.name, d.get(point)) for s, d in zip(suites, per, strict=True)]
        if len({ds for _, ds in seen if ds}) > 1:
            said = ", ".join(f"{name} d={'/'.join(fmt(x) for x in ds)}" for name, ds in seen if ds)
            found.append(f"{point} ({said})")
    return found


def compare_markdown(suites: Sequence[Suite]) -> str:
    """The side-by-side tables; results of one fabric are read as one (``by_fabric``)."""
    suites = by_fabric(suites)
    names = [s.name for s in suites]
    stats = [by_point(s.rows) for s in suites]
    tests = list(dict.fromkeys(t for s in suites for t in s.plan["tests"]))
    lines = [
        f"# BMWG results compared: {', '.join(names)}",
        "",
        "Each cell: mean over the faithful runs [95 % interval, t over seeds] n. Ratios: "
        f"each fabric's value ÷ **{names[0]}**'s, paired by seed (a seed drives the same "
        "arrivals on every fabric), mean over the n seeds both ran [95 % interval, t over "
        f'those ratios]; "differs" where it excludes 1 ("by under {SMALL * 100:g} %" where '
        f"the whole interval is within {SMALL * 100:g} % of 1). With n=2, t is 12.7: only a "
        "large or consistent difference shows.",
        "",
    ]
    superseded = [f"- {s.name} {line}" for s in suites for line in s.superseded]
    if superseded:
        lines += ["Tests run again (the later result is the one compared):", *superseded, ""]
    for test in tests:
        title = BY_ID[test].title if test in BY_ID else ""
        header = ["point", "KPI", *names, *(f"{n} ÷ {names[0]}" for n in names[1:])]
        lines += [f"## {test} {title}", "", "| " + " | ".join(header) + " |"]
        lines.append("| --- | --- |" + " ---: |" * (len(header) - 2))
        keys = dict.fromkeys(
            (point, column)
            for st in stats
            for point, data in st.get(test, {}).items()
            for column in data["kpis"]
        )
        absent = []
        for point, column in keys:
            data = [st.get(test, {}).get(point) for st in stats]
            kpis = [d["kpis"].get(column) if d else None for d in data]
            if not any(k and k.get("n") for k in kpis):
                absent.append(f"{point} {column}")
                continue
            cells = [_cell(k) for k in kpis]
            base = per_seed(data[0], column)
            ratios = [ratio_cell(per_seed(d, column), base) for d in data[1:]]
            lines.append("| " + " | ".join([point, column, *cells, *ratios]) + " |")
        if absent:
            lines += [
                "",
                "Measured by no run of any fabric (the point's traffic has none of it): "
                + "; ".join(absent)
                + ".",
            ]
        mixed = mixed_dilations(suites, test)
        if mixed:
            lines += [
                "",
                f"Run at different time dilations: {'; '.join(mixed)}. The emulator's own "
                "cost per message is wall time, which d divides: there a latency ratio "
                "mixes the fabrics with the emulation (each report's latency parts say "
                "how much).",
            ]
        lines.append("")
    return "\n".join(lines)
