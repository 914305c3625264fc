"""gate: does the plan-time gate's word match the fidelity verdict? A confusion table
over runs that were really made: every committed reference run (``results/reference``,
each with its resolved ``spec.yaml`` and its verdict), the ``scale-64`` benchmark's
undilated serving runs and the ``dilation`` benchmark's size runs at
``time_dilation: auto``.

Each run is planned again, nothing built, by today's planner (``runner.prepare``) at
the dilation it ran at, against the envelope runs are judged by here (this machine's,
else the default): the gate says **fits** or **over**; the run's own verdict said
**faithful** or not. Four cells: fits & faithful (agree), over & unfaithful (caught),
over & faithful (a false refusal: the issue-28 complaint), fits & unfaithful (a miss:
what the gate does not model). For every run the table also gives the ``d`` that
``time_dilation: auto`` chooses for its plan, so a false refusal at d = 1 reads as "auto
runs it at d = 2" rather than "refused": only a plan over the envelope at every d up to
``--max-dilation`` is refused.

No root, no emulation (a few seconds of planning per run): ``kvfabric bench gate``.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from .common import RESULTS, result, show

NAME = "gate"
REFERENCES = Path(__file__).resolve().parent.parent / "results" / "reference"
SCALE_SHAPES = {16: (4, 4), 64: (8, 8), 128: (16, 8), 256: (32, 8)}  # GPUs: servers, per server
CELLS = ("fits, faithful", "over, unfaithful", "over, faithful", "fits, unfaithful")


# ----- pure parts (unit-tested) ------------------------------------------------------
def cell(fits: bool, faithful: bool) -> str:
    """The confusion-table cell of one run."""
    return f"{'fits' if fits else 'over'}, {'faithful' if faithful else 'unfaithful'}"


def confusion(rows: list[dict[str, Any]]) -> dict[str, int]:
    """Runs per cell (every cell present), over rows the planner could judge."""
    counts = Counter(r["cell"] for r in rows if r.get("cell"))
    return {c: counts.get(c, 0) for c in CELLS}


def scale_spec(gpus: int, processes: str, auto: bool) -> str:
    """The scale-64 benchmark's serving spec for ``gpus`` (its text, as it ran)."""
    from . import scale

    servers, per = SCALE_SHAPES[gpus]
    half = servers // 2
    text = scale.SPEC.format(
        duration=12.0,
        servers=servers,
        gpus=per,
        processes=processes,
        prefill=list(range(half)),
        decode=list(range(half, servers)),
        n=24,
    )
    if auto:
        auto_scale = "scale: {bandwidth: 1.0e-4, time_dilation: auto}"
        text = text.replace("scale: {bandwidth: 1.0e-4}", auto_scale)
    return text


# ----- planning (no root) -------------------------------------------------------------
def judge(source: str | Path, seed: int | None, d: float) -> dict[str, Any]:
    """The gate's word on one run's spec at dilation ``d``, and the d ``auto`` chooses."""
    from experiments.orchestration.runner import prepare
    from experiments.spec.load import expand, load_spec

    def plan(value: str) -> Any:
        spec = load_spec(source, [f"scale.time_dilation={value}"], seed=seed)
        (p,) = prepare(spec, expand(spec), force=True)
        return p

    at = plan(f"{d:g}")
    auto = plan("auto")
    return {
        "fits": not at.plan.exceeded,
        "over": list(at.plan.exceeded),
        "auto_d": auto.chosen.d,
        "auto_refused": bool(auto.plan.exceeded),
    }


def reference_runs(root: Path = REFERENCES) -> list[dict[str, Any]]:
    """Every committed reference run: where, seed, d it ran at and its verdict."""
    out = []
    for summary in sorted(root.glob("*/runs/*/summary.json")):
        s = json.loads(summary.read_text())
        if s.get("error") or s.get("partial") or not s.get("fidelity"):
            continue
        out.append(
            {
                "source": "reference",
                "run": f"{s['experiment']} {s.get('label', '')}",
                "spec": summary.parent / "spec.yaml",
                "seed": s.get("seed"),
                "d": float(s.get("time_dilation") or 1),
                "faithful": bool(s["fidelity"]["ok"]),
                "failed": [k for k, c in s["fidelity"].get("checks", {}).items() if not c["ok"]],
            }
        )
    return out


def benchmark_runs() -> list[dict[str, Any]]:
    """The scale-64 benchmark's runs (d = 1) and the dilation benchmark's size runs."""
    out = []
    scale64 = RESULTS / "scale-64.json"
    if scale64.is_file():
        for r in json.loads(scale64.read_text())["rows"]:
            out.append(
                {
                    "source": "scale-64",
                    "run": f"{r['gpus']} GPUs, agents.processes={r['processes']}",
                    "spec": scale_spec(r["gpus"], r["processes"], auto=False),
                    "seed": 1,
                    "d": 1.0,
                    "faithful": bool(r["faithful"]),
                    "failed": r["failed_checks"],
                }
            )
    size = RESULTS / "dilation-size.json"
    if size.is_file():
        record = json.loads(size.read_text())
        for r in record.get("size") or record.get("rows") or []:
            out.append(
                {
                    "source": "dilation size",
                    "run": f"{r['gpus']} GPUs, auto",
                    "spec": scale_spec(r["gpus"], "auto", auto=True),
                    "seed": r["seed"],
                    "d": float(r["d"]),
                    "faithful": r["verdict"] == "ok",
                    "failed": sorted(r.get("failed") or {}),
                }
            )
    return out


def run(quick: bool = False) -> dict:
    runs = reference_runs() + benchmark_runs()
    if quick:  # one run per experiment or benchmark size
        seen, kept = set(), []
        for r in runs:
            key = r["run"].split()[0] if r["source"] == "reference" else r["run"]
            if key not in seen:
                seen.add(key)
                kept.append(r)
        runs = kept
    rows = []
    for r in runs:
        row = {k: v for k, v in r.items() if k != "spec"}
        try:
            word = judge(r["spec"], r["seed"], r["d"])
        except (ValueError, KeyError, TypeError) as exc:  # a spec today's schema refuses
            row["error"] = f"{type(exc).__name__}: {exc}"
            rows.append(row)
            continue
        row |= word | {"cell": cell(word["fits"], r["faithful"])}
        rows.append(row)
    table = confusion(rows)
    judged = sum(table.values())
    agree = table["fits, faithful"] + table["over, unfaithful"]
    refused_faithful = [r for r in rows if r.get("cell") == "over, faithful" and r["auto_refused"]]
    record = result(
        NAME,
        value=agree,
        baseline=judged,
        unit="runs where the gate's word matched the verdict, of runs judged",
        target="no faithful run refused under time_dilation auto",
        target_met=not refused_faithful,
        quick=quick,
        confusion=table,
        unplannable=[r for r in rows if r.get("error")],
        rows=rows,
    )
    show(record, ["gate at the run's d", "runs"], [[c, n] for c, n in table.items()])
    show(
        record,
        ["source", "run", "seed", "d", "verdict", "gate", "auto d"],
        [
            [
                r["source"],
                r["run"],
                r["seed"],
                r["d"],
                "ok" if r["faithful"] else "failed " + ", ".join(r["failed"]),
                r.get("cell", r.get("error", "")).split(",")[0],
                r.get("auto_d"),
            ]
            for r in rows
        ],
    )
    return record
