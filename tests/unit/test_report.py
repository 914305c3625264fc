"""Results directory, report.md and plots from a canned run written with results.py;
`kvfabric report` through the CLI's main(argv). No root, no network."""

import json
import re
import shutil
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from experiments.analysis.summary import summarize
from experiments.cli.main import main
from experiments.output.report import write_report
from experiments.output.results import (
    NotARunError,
    ResultsError,
    load_run,
    new_run_dir,
    read_table,
    write_json,
    write_table,
)
from experiments.spec.load import load_spec

MS = 1_000_000
PNG = b"\x89PNG\r\n\x1a\n"
SPEC = {
    "name": "incast-basic",
    "seed": 7,
    "duration_s": 1.0,
    "scale": {"bandwidth": 1e-4},
    "fabric": {"kind": "spine_leaf", "spines": 2, "leaves": 2, "buffer_pkts": 64},
    "controller": {"policy": "ecmp"},
    "workloads": [
        {"kind": "incast", "receiver": "h0", "senders": 2, "rounds": 2, "sru_bytes": 5000},
        {
            "kind": "serving",
            "model": "llama-3-8b",
            "gpu": "h100",
            "prefill": {"servers": [1]},
            "decode": {"servers": [2]},
            "arrivals": {"synthetic": {"n": 3, "rate_per_s": 10.0}},
            "slo": {"ttft_ms": 100.0, "tpot_ms": 20.0},
        },
    ],
}
NOW = datetime(2025, 1, 2, 3, 4, 5)


def tables(senders: int = 2) -> dict[str, pd.DataFrame]:
    flows = []
    for rnd in range(2):
        for i in range(senders):
            t0 = rnd * 100 * MS
            flows.append(
                {
                    "flow_id": len(flows),
                    "kind": "incast",
                    "tenant": "default",
                    "src": f"h{i + 1}",
                    "dst": "h0",
                    "bytes": 5000,
                    "dscp": 0,
                    "t_sched_ns": t0,
                    "t_start_ns": t0,
                    "t_end_ns": t0 + (i + 2) * MS,
                    "fct_ms": float(i + 2),
                    "ok": True,
                    "error": None,
                    "round": rnd,
                }
            )
    flows.append(
        flows[-1]
        | {
            "flow_id": len(flows),
            "ok": False,
            "error": "timeout",
            "t_end_ns": None,
            "fct_ms": np.nan,
        }
    )
    t = np.arange(0, 200 * MS, 5 * MS)
    queues = pd.concat(
        [
            pd.DataFrame(
                {
                    "t_ns": t,
                    "node": "leaf0",
                    "port": port,
                    "backlog_pkts": (np.arange(len(t)) % 10) * k,
                    "backlog_bytes": (np.arange(len(t)) % 10) * k * 1500,
                    "drops": np.arange(len(t)) // 10 * k,
                    "sent_bytes": np.arange(len(t)) * 1000,
                }
            )
            for k, port in [(1, "eth1"), (5, "eth2")]
        ],
        ignore_index=True,
    )
    links = pd.concat(
        [
            pd.DataFrame(
                {
                    "t_ns": t,
                    "node": node,
                    "port": "eth1",
                    "tx_bytes": np.arange(len(t)) * 20_000 * k,
                    "rx_bytes": 0,
                    "tx_packets": 0,
                    "rx_packets": 0,
                    "tx_dropped": 0,
                }
            )
            for k, node in [(1, "leaf0"), (2, "spine0")]
        ],
        ignore_index=True,
    )
    requests = pd.DataFrame(
        {
            "request_id": [0, 1, 2],
            "tenant": "default",
            "arrival_ns": [0, MS, 2 * MS],
            "prefill_host": "h1",
            "decode_host": "h2",
            "input_tokens": 100,
            "output_tokens": 3,
            "cached_tokens": 0,
            "kv_bytes": 1000,
            "ttft_ms": [40.0, 60.0, 200.0],
            "tpot_ms": [10.0, 10.0, 10.0],
            "e2e_ms": [60.0, 80.0, 220.0],
            "kv_transfer_ms": [5.0, 6.0, 7.0],
        }
    )
    tokens = pd.DataFrame(
        {
            "request_id": [0, 0, 1, 1],
            "token_index": [1, 2, 1, 2],
            "t_ns": [1, 2, 3, 4],
            "itl_ms": [9.0, 11.0, 10.0, 10.0],
        }
    )
    cpu = pd.DataFrame({"t_ns": t, "cpu_pct": 30.0, "max_core_pct": 50.0})
    return {
        "flows": pd.DataFrame(flows),
        "queues": queues,
        "links": links,
        "requests": requests,
        "tokens": tokens,
        "cpu": cpu,
    }


def canned_run(
    root: Path, senders: int = 2, partial: bool = False, fidelity_ok: bool = True
) -> Path:
    raw = SPEC | {"workloads": [SPEC["workloads"][0] | {"senders": senders}, SPEC["workloads"][1]]}
    spec = load_spec(yaml.safe_dump(raw, sort_keys=False))  # resolved, as a run writes it
    run_dir = new_run_dir(root, "incast-basic", seed=7, now=NOW)
    t = tables(senders)
    for name, df in t.items():
        write_table(run_dir, name, df)
    (run_dir / "spec.yaml").write_text(yaml.safe_dump(spec.resolved, sort_keys=False))
    metrics = summarize(
        t["flows"], t["requests"], t["tokens"], t["queues"], spec.config, t["links"]
    )
    write_json(
        run_dir,
        "summary",
        {
            "experiment": "incast-basic",
            "run_id": run_dir.name,
            "label": f"senders={senders},seed=7",
            "seed": 7,
            "point": {"workloads.0.senders": senders},
            "partial": partial,
            "scale": 1e-4,
            "started": "2025-01-02T03:04:05",
            "ended": "2025-01-02T03:04:07",
            "error": None,
            "fidelity": {
                "ok": fidelity_ok,
                "checks": {
                    "lateness_p99_ms": {
                        "ok": True,
                        "value": 0.4,
                        "threshold": 2.0,
                        "unit": "ms",
                        "detail": "agents on time",
                    },
                    "cpu_max_pct": {
                        "ok": fidelity_ok,
                        "value": 40.0 if fidelity_ok else 97.5,
                        "threshold": 90.0,
                        "unit": "%",
                        "detail": "busiest core",
                    },
                },
            },
            "metrics": metrics,
        },
    )
    return run_dir


# ---- results directory ---------------------------------------------------------------------


def test_new_run_dir_names_and_collisions(tmp_path):
    a = new_run_dir(tmp_path, "exp", 7, now=NOW)
    b = new_run_dir(tmp_path, "exp", 7, now=NOW)
    c = new_run_dir(tmp_path, "exp", 7, now=NOW)
    assert a == tmp_path / "exp" / "20250102-030405-7"
    assert b.name == "20250102-030405-7-2" and c.name == "20250102-030405-7-3"
    assert all(":" not in p.name for p in (a, b, c))


def test_new_run_dir_unwritable_root(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ResultsError, match="cannot create"):
        new_run_dir(blocker / "results", "exp", 1)
    with pytest.raises(ResultsError, match="plain file name"):
        new_run_dir(tmp_path, "../escape", 1)


def test_tables_and_json_round_trip_atomically(tmp_path):
    df = pd.DataFrame({"a": [1, 2], "error": [None, "timeout"]})
    path = write_table(tmp_path, "flows", df)
    assert path.name == "flows.parquet"
    pd.testing.assert_frame_equal(read_table(tmp_path, "flows"), df)
    assert read_table(tmp_path, "tokens") is None
    write_json(tmp_path, "summary", {"b": float("nan"), "a": np.int64(3), "c": (1, np.float64(2))})
    text = (tmp_path / "summary.json").read_text()
    assert json.loads(text) == {"a": 3, "b": None, "c": [1, 2.0]}
    assert text.index('"a"') < text.index('"b"')  # sorted keys: stable bytes
    assert sorted(p.name for p in tmp_path.iterdir()) == ["flows.parquet", "summary.json"]


def test_failed_write_leaves_no_file(tmp_path):
    class Boom(pd.DataFrame):
        def to_parquet(self, *args, **kwargs):
            Path(args[0]).write_bytes(b"half")
            raise RuntimeError("crash mid-write")

    with pytest.raises(RuntimeError):
        write_table(tmp_path, "flows", Boom({"a": [1]}))
    assert list(tmp_path.iterdir()) == []


def test_load_run(tmp_path):
    run_dir = canned_run(tmp_path)
    run = load_run(run_dir)
    assert run.summary["label"] == "senders=2,seed=7" and run.config.fabric.kind == "spine_leaf"
    assert len(run.flows) == 5 and run.cpu is not None and run.events == {}
    (run_dir / "links.parquet").unlink()
    assert load_run(run_dir).links is None
    with pytest.raises(NotARunError, match="not a kvfabric run"):
        load_run(tmp_path)


# ---- report --------------------------------------------------------------------------------


def test_single_run_report(tmp_path):
    run_dir = canned_run(tmp_path)
    path = write_report([run_dir])
    assert path == run_dir / "report.md"
    text = path.read_text()
    lines = text.splitlines()
    assert lines[0].startswith("# incast-basic: senders=2,seed=7")
    # the title, the kvfabric that made the run, then the verdict
    assert lines[2] == "Made by kvfabric (version and git revision not recorded)."
    assert lines[4].startswith("**Fidelity: OK**")
    assert "PARTIAL" not in text
    assert "| cpu_max_pct | yes | 40 | 90 | % | busiest core |" in text
    assert "- fabric: **spine_leaf** (spines=2, leaves=2, hosts_per_leaf=" in text
    assert "- policy: **ecmp**" in text
    # FCTs 2, 3 ms twice: p50 2.5; TTFT 40, 60, 200: p50 60; drops on eth2: 3 steps of 5
    assert "| FCT, all flows (ms) | 4 | 2.5 | 2.5 |" in text
    assert "| TTFT (ms) | 3 | 100 | 60 |" in text
    assert "| drops | 18 | packets |" in text
    assert "| failed flows | 1 |" in text
    assert "- 1 × timeout" in text
    assert "### The fabric and its hot links" in text and "Numbered red dots" in text
    for name in ("fct_cdf", "serving_cdf", "queues", "links", "fabric"):
        png = run_dir / "plots" / f"{name}.png"
        assert f"(plots/{name}.png)" in text
        assert png.stat().st_size > 1000 and png.read_bytes()[:8] == PNG


def test_report_is_deterministic(tmp_path):
    run_dir = canned_run(tmp_path)
    write_report([run_dir])
    first = {p.name: p.read_bytes() for p in sorted((run_dir / "plots").iterdir())}
    first_md = (run_dir / "report.md").read_text()
    write_report([run_dir])
    assert (run_dir / "report.md").read_text() == first_md
    assert {p.name: p.read_bytes() for p in sorted((run_dir / "plots").iterdir())} == first


def test_partial_and_unfaithful_run_say_so_at_the_top(tmp_path):
    run_dir = canned_run(tmp_path, partial=True, fidelity_ok=False)
    for name in ("requests", "tokens", "links"):
        (run_dir / f"{name}.parquet").unlink()  # interrupted before writing them
    text = write_report([run_dir]).read_text()
    head = "\n".join(text.splitlines()[:8])
    assert "PARTIAL RUN: this run was interrupted and is incomplete" in head
    assert "Fidelity: NOT OK: the emulation was not faithful during this run" in head
    assert "(failed: cpu_max_pct)" in head
    assert "| cpu_max_pct | **NO** | 97.5 | 90 |" in text
    assert not (run_dir / "plots" / "links.png").exists()
    assert (run_dir / "plots" / "fct_cdf.png").exists()


def test_run_without_metrics_is_summarised_from_its_tables(tmp_path):
    run_dir = canned_run(tmp_path, partial=True)
    summary = json.loads((run_dir / "summary.json").read_text())
    del summary["metrics"], summary["fidelity"]
    write_json(run_dir, "summary", summary)
    text = write_report([run_dir]).read_text()
    assert "**Fidelity: not judged**" in text
    assert "| FCT, all flows (ms) | 4 | 2.5 | 2.5 |" in text


def test_comparison_of_a_sweep(tmp_path):
    runs = [canned_run(tmp_path / "results", senders=n) for n in (1, 2, 3)]
    path = write_report(runs, tmp_path / "cmp")
    assert path == tmp_path / "cmp" / "report.md"
    text = path.read_text()
    assert text.startswith("# Comparison of 3 runs: incast-basic")
    assert "**Fidelity: OK** in every run." in text
    for n in (1, 2, 3):
        assert f"| senders={n},seed=7 |" in text
    values, *latency = [line for line in text.splitlines() if line.startswith("| label |")]
    assert "point workloads.0.senders" in values and "drops" in values
    # one narrow table per latency metric the headline does not already show
    assert "| label | TPOT p50 | TPOT p99 |" in latency
    assert not [line for line in latency if "TTFT" in line or "FCT" in line]
    assert all(line.count("|") == 4 for line in latency)
    # senders=3: FCTs 2, 3, 4 ms per round -> p50 3, in the headline; a p99 of 6 flows is
    # no number to print
    fct = text.split("**FCT, all flows (ms)**")[1]
    assert "| senders=3,seed=7 | 3 | n too small (n=6) | – |" in fct
    # the first screen: verdict, then the headline, each run's TTFT beside nothing predicted
    head = text.split("## Key metrics")[0]
    assert "## Headline" in head and "**TTFT (ms)**" in head
    assert "| senders=1,seed=7 | 60 | n too small (n=3) | – |" in head
    png = tmp_path / "cmp" / "plots" / "compare_sweep.png"
    assert png.read_bytes()[:8] == PNG and "(plots/compare_sweep.png)" in text


def test_comparison_default_dir_and_bars(tmp_path):
    a = canned_run(tmp_path, senders=2)
    b = canned_run(tmp_path, senders=2, fidelity_ok=False)
    summary = json.loads((b / "summary.json").read_text())
    summary["point"], summary["label"] = {"controller.policy": "adaptive"}, "policy=adaptive"
    write_json(b, "summary", summary)
    path = write_report([a, b])
    assert path.parent.parent == a.parent and path.parent.name.startswith("compare-")
    text = path.read_text()
    assert "NOT OK in 1 of 2 runs** (policy=adaptive)" in text
    assert "| senders=2,seed=7 |" in text and "| policy=adaptive |" in text
    assert list((path.parent / "plots").glob("compare_*.png"))


# ---- CLI -----------------------------------------------------------------------------------


def test_cli_report(tmp_path, capsys):
    run_dir = canned_run(tmp_path)
    assert main(["report", str(run_dir)]) == 0
    assert capsys.readouterr().out.strip() == str(run_dir / "report.md")
    assert main(["report", str(run_dir), str(run_dir), "--out", str(tmp_path / "c")]) == 0
    assert (tmp_path / "c" / "report.md").is_file()


def test_cli_report_not_a_run_is_a_usage_error(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["report", str(tmp_path / "empty")]) == 2
    assert "not a kvfabric run directory" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "missing")]) == 2
    with pytest.raises(SystemExit) as exc:
        main(["report"])
    assert exc.value.code == 2


def test_the_analytic_estimate_is_printed_beside_the_measurement(tmp_path):
    from experiments.output.report import _estimate_lines

    lines = _estimate_lines({"incast": {"round_ms": 320.0, "fct_ms": {"p50": 1.5, "p99": 2.5}}})
    text = "\n".join(lines)
    assert "## Analytic estimate" in text
    assert "| incast.round_ms | 320 |" in text
    assert "| incast.fct_ms | p50 1.5, p99 2.5 |" in text
    assert _estimate_lines(None) == []


def test_comparison_overlays_the_distributions_with_the_estimate(tmp_path):
    runs = [canned_run(tmp_path / "results", senders=n) for n in (1, 2)]
    summary = json.loads((runs[0] / "summary.json").read_text())
    summary["estimate"] = {"serving": {"ttft_ms": {"p50": 50.0, "p99": 150.0}}}
    write_json(runs[0], "summary", summary)
    text = write_report(runs, tmp_path / "cmp").read_text()
    plots_dir = tmp_path / "cmp" / "plots"
    for name in ("ttft", "itl", "kv_transfer", "fct"):
        assert (plots_dir / f"cdf_{name}.png").read_bytes()[:8] == PNG
        assert f"(plots/cdf_{name}.png)" in text
    # no flows table has a slowdown column yet: no slowdown chart
    assert not (plots_dir / "cdf_fct_slowdown.png").exists() and "slowdown" not in text
    # the bars no longer repeat what a distribution shows
    assert not list(plots_dir.glob("compare_ttft*.png")) and not list(
        plots_dir.glob("compare_fct*")
    )


def test_comparison_draws_the_fct_slowdown_when_flows_have_it(tmp_path):
    runs = [canned_run(tmp_path / "results", senders=n) for n in (1, 2)]
    for run in runs:
        flows = read_table(run, "flows")
        write_table(run, "flows", flows.assign(slowdown=flows["fct_ms"] / 2.0))
    text = write_report(runs, tmp_path / "cmp").read_text()
    assert (tmp_path / "cmp" / "plots" / "cdf_fct_slowdown.png").exists()
    assert "### FCT slowdown, distribution per run" in text


def test_comparison_links_its_runs_relative_to_itself(tmp_path):
    runs = [canned_run(tmp_path / "results", senders=n) for n in (1, 2)]
    for run in runs:
        write_report([run])
    out = tmp_path / "results" / "compare"
    text = write_report(runs, out).read_text()
    assert str(tmp_path) not in text
    assert f"[senders=1,seed=7](../incast-basic/{runs[0].name}/report.md)" in text
    moved = shutil.move(tmp_path / "results", tmp_path / "elsewhere")
    for link in re.findall(r"\]\((\.\./[^)]+)\)", text):
        assert (Path(moved) / "compare" / link).is_file(), link


def test_first_screen_puts_each_headline_number_beside_its_estimate(tmp_path):
    run_dir = canned_run(tmp_path)
    summary = json.loads((run_dir / "summary.json").read_text())
    summary["estimate"] = {"serving": {"ttft_ms": {"p50": 50.0, "p99": 150.0}}}
    write_json(run_dir, "summary", summary)
    text = write_report([run_dir]).read_text()
    first_screen = text.split("## Run")[0]
    assert first_screen.index("**Fidelity: OK**") < first_screen.index("## Headline")
    # TTFT 40, 60, 200 ms: p50 60 beside the predicted 50 / 150; three requests support
    # no p99 (summary.json keeps it: 197.2)
    # and the p50's 95 % interval, a bootstrap over the three requests
    assert "| TTFT (ms) | 60 | 40 – 200 | n too small (n=3) | p50 50 · p99 150 |" in first_screen
    assert "| ITL (ms) | 10 |" in first_screen  # measured, nothing predicted
    assert "| goodput |" in first_screen and "Gbit/s real-equivalent" in first_screen
    assert "| drops | 18 | – | packets |" in first_screen
    assert "0.0001 of the real ones" in first_screen
    # the detailed latencies come as a few narrow tables, serving first
    detail = text.split("## Key metrics")[1]
    assert detail.index("Serving latency:") < detail.index("Flows and transfers:")
    assert detail.index("Flows and transfers:") < detail.index("Emulator:")


def test_a_bundled_experiment_states_its_question():
    from experiments.analysis.headline import question

    assert question("link-failure").startswith("A rail↔spine link goes down")
    assert question("incast-basic") is None and question("../etc/passwd") is None


def test_a_stored_spec_of_an_older_version_takes_the_newer_defaults(tmp_path):
    """A committed run's spec.yaml lacks keys added since (scale.mtu, storage nodes) and
    names a trace by a path on the machine that ran it: it still reads, the missing keys
    take their defaults, the trace keeps its name, and the report lists the spec as written."""
    run_dir = canned_run(tmp_path)
    spec = yaml.safe_load((run_dir / "spec.yaml").read_text())
    del spec["scale"]["mtu"], spec["fabric"]["storage_nodes"]
    spec["workloads"][1]["arrivals"] = {"trace": "/nowhere/trace.csv", "format": "azure"}
    (run_dir / "spec.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    config = load_run(run_dir).config
    assert config.scale.mtu == 1500 and config.fabric.storage_nodes == 0
    assert config.workloads[1].arrivals.trace == "/nowhere/trace.csv"
    text = write_report([run_dir]).read_text()
    assert "- packets: MTU 1500;" in text and "- policy: **ecmp**" in text
    assert "storage_nodes" not in text.split("- fabric:")[1].split("\n")[0]


def test_a_stored_spec_the_schema_cannot_read_leaves_the_configuration_unknown(tmp_path):
    run_dir = canned_run(tmp_path)
    (run_dir / "spec.yaml").write_text(yaml.safe_dump({"name": "x", "fabric": {"kind": "?"}}))
    run = load_run(run_dir)
    assert run.config is None and run.spec["name"] == "x"
    text = write_report([run_dir]).read_text()
    assert "- experiment: incast-basic," in text and "- fabric:" not in text
    assert "- scale: 0.0001" in text  # summary.json's


def test_the_report_states_the_grain_of_every_queue(tmp_path):
    """SPEC's spine_leaf 2 × 2 × 4 at scale 1e-4: 100 and 400 Gbit/s ports, 64-packet
    buffers; the canned run's hottest queue (leaf0 eth2) is a 100 Gbit/s one."""
    text = write_report([canned_run(tmp_path)]).read_text()
    section = text.split("### Grain of the fabric's queues")[1].split("## Key metrics")[0]
    assert (
        "| gpu→leaf, leaf→gpu | 16 | 100 | 15,140,000 | 64 | 96,896 | 77,517 | 5 | 10 "
        "| leaf0:2 (mean 21.92, max 45 packets) |" in section
    )
    assert (
        "| leaf→spine, spine→leaf | 8 | 400 | 15,140,000 | 64 | 96,896 | 19,379 | 20 | 40 | – |"
        in section
    )
    assert "both ways: 6,056 µs real-equivalent" in section
    assert "Time dilation d = 1" in section and "not RDMA over lossless Ethernet" in section


def test_the_headline_of_a_dilated_run_says_its_times_are_wall_times_over_d():
    from experiments.output.formatting import units_note

    assert "times are as measured" in units_note(1e-4)
    dilated = units_note(1e-4, 4)
    assert "times are as measured" not in dilated
    assert "4 times slower" in dilated and "wall times ÷ 4" in dilated
    assert "different time dilations" in units_note(1e-4, 0)


def test_key_metrics_are_real_equivalent_and_the_emulated_ones_are_labelled_raw(tmp_path):
    text = write_report([canned_run(tmp_path)]).read_text()
    key = text.split("## Key metrics")[1]
    values, _, raw = key.partition("Raw, as on the emulated links")
    assert raw, "no labelled raw section"
    assert "| goodput |" in values and "Gbit/s real-equivalent" in values
    assert "Mbit/s" not in values  # no emulated rate beside the real-equivalent ones
    assert "| goodput |" in raw and "Mbit/s emulated" in raw
    # two lateness figures, named apart: the table's start lateness and the judged column
    assert "| agent start lateness (ms) |" in values
    assert "judges the agents' timer lag, `issue_lateness_ms`" in values
