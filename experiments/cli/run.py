"""``kvfabric run``, ``kvfabric demo`` (the flagship experiment, what ``make demo``
runs), ``kvfabric list`` and ``kvfabric cli``: the commands that build fabrics
from specs. ``--cluster user@host,...`` sets a spec's ``cluster.servers``; ``--dry-run``
then shows the placement on them. Exit codes: 0 every run complete, 1 a run failed,
was interrupted or could not start (a multi-server build, in this version); 2 bad
input; 3 this machine's envelope refuses a run (``--dry-run``: would refuse it)."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from experiments.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_USAGE,
    console,
    dilation_arg,
    err,
    print_json,
    say,
)
from experiments.spec.cluster import cluster_override
from experiments.spec.load import (
    HANDOUTS_DIR,
    REFERENCE_DIR,
    SPECS_DIR,
    bundled_names,
    expand,
    load_spec,
    locate,
)
from topologies.scale import DEFAULT_MAX_DILATION

ROOT = SPECS_DIR.parents[1]
FLAGSHIP = "topology-aware-placement"  # kvfabric demo, make demo


def add_parsers(sub: Any) -> None:
    r = sub.add_parser("run", help="run a spec (a file, or a bundled experiment's name)")
    r.add_argument("spec", help="SPEC.yaml or the name of a bundled spec (kvfabric list)")
    _run_options(r)
    r.set_defaults(handler=cmd_run)

    d = sub.add_parser("demo", help=f"run the flagship experiment ({FLAGSHIP}), as make demo")
    _run_options(d)
    d.set_defaults(handler=cmd_run, spec=FLAGSHIP)

    ls = sub.add_parser("list", help="bundled experiments with one-line purposes")
    ls.add_argument("--json", action="store_true", help="the list as JSON")
    ls.set_defaults(handler=cmd_list)

    c = sub.add_parser("cli", help="a spec's fabric up, controller on, Mininet's CLI")
    c.add_argument("spec")
    c.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    _cluster_option(c)
    c.set_defaults(handler=cmd_cli)


def _cluster_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--cluster",
        metavar="USER@HOST,...",
        help="emulate on these servers (user default root; localhost is this "
        "machine): sets cluster.servers",
    )


def _run_options(r: argparse.ArgumentParser) -> None:
    r.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a key: --set workloads.0.senders=4 (repeatable)",
    )
    r.add_argument("--seed", type=int, help="seed of the first run")
    r.add_argument(
        "--repeat",
        type=int,
        default=1,
        metavar="R",
        help="R runs per sweep point, seeds seed..seed+R-1",
    )
    r.add_argument(
        "--out",
        default="results",
        metavar="DIR",
        help="results root (results/); a run goes to DIR/<name>/<run-id>",
    )
    shown = r.add_mutually_exclusive_group()
    shown.add_argument("--quiet", "-q", action="store_true", help="no progress, just the result")
    shown.add_argument(
        "--live",
        action="store_true",
        help="instead of the progress bar, show the run as it goes: hottest queues and "
        "links, requests in flight, TTFT/ITL so far, each fidelity check as it stands "
        "(needs a terminal)",
    )
    r.add_argument(
        "--dry-run",
        action="store_true",
        help="check the spec, print each run's demand on this machine, build nothing",
    )
    r.add_argument(
        "--json",
        action="store_true",
        help="print the result as JSON on stdout: with --dry-run the plan (each run's "
        "demand, dilation, wall time and warnings), else each run's outcome; the exit "
        "code is the same",
    )
    r.add_argument(
        "--capture",
        action="append",
        default=[],
        metavar="WHERE",
        help="tcpdump a host (gpu0_0) or switch port (leaf0:3, leaf0:spine1) into "
        "the run's captures/ (repeatable; spec: capture.at)",
    )
    _cluster_option(r)
    r.add_argument(
        "--force",
        action="store_true",
        help="run even where the plan exceeds this machine's envelope; the "
        "results then say 'envelope: exceeded'",
    )
    r.add_argument(
        "--max-dilation",
        type=dilation_arg("--max-dilation"),
        default=DEFAULT_MAX_DILATION,
        metavar="N",
        help="the largest time dilation scale.time_dilation: auto may choose (default "
        f"{DEFAULT_MAX_DILATION:g}): a run at d takes d times its duration of wall time",
    )
    r.add_argument(
        "--min-dilation",
        type=dilation_arg("--min-dilation"),
        default=1.0,
        metavar="N",
        help="the smallest time dilation scale.time_dilation: auto may choose (default 1): "
        "runs compared across fabrics at one d carry the same emulator cost per message",
    )


def dilation_range(args: argparse.Namespace) -> tuple[float, float] | None:
    """``(--min-dilation, --max-dilation)``, or None after saying why they do not fit
    together (the floor above the cap)."""
    low, high = args.min_dilation, args.max_dilation
    if low > high:
        err.print(f"[red]bad input:[/red] --min-dilation {low:g} is above --max-dilation {high:g}")
        return None
    return low, high


def _spec_and_runs(args: argparse.Namespace) -> tuple[Any, list[Any]]:
    """The spec with ``--set``, then ``--cluster`` (a parse error is bad input), applied."""
    cluster = [] if args.cluster is None else [cluster_override(args.cluster)]
    overrides = [*args.set, *cluster]
    spec = load_spec(
        locate(args.spec),
        overrides,
        getattr(args, "seed", None),
        captures=getattr(args, "capture", []),
    )
    return spec, expand(spec, getattr(args, "repeat", 1))


def _require_engine(runs: list[Any]) -> bool:
    """Whether every run's cluster can be built here; if not, says why on one line."""
    from experiments.orchestration.cluster import EngineUnavailable, require_engine

    try:
        for run in runs:
            require_engine(run.config, run.fabric())
    except EngineUnavailable as exc:
        err.print(f"[red]refused:[/red] {escape(str(exc))}", soft_wrap=True)
        return False
    return True


def cmd_run(args: argparse.Namespace) -> int:
    from experiments.orchestration.runner import EnvelopeExceeded, run_spec
    from experiments.orchestration.runtime import RunBusy
    from experiments.output.results import ResultsError

    spec, runs = _spec_and_runs(args)
    dilations = dilation_range(args)
    if dilations is None:
        return EXIT_USAGE
    if args.dry_run and args.json:
        return _dry_run_json(spec, runs, args.force, dilations)
    if args.dry_run:
        return _dry_run(spec, runs, args.force, dilations)
    if not _require_engine(runs):
        return EXIT_FAILED
    if args.json:
        args.quiet = True  # stdout holds the JSON alone; the warnings go to stderr
    if not args.quiet:
        console.print(f"[bold]{spec.name}[/bold]: {len(runs)} run(s) → {args.out}/{spec.name}/")
    if not args.quiet or args.json:
        _print_transport([(r.config, r.config.scale) for r in runs], err)
        _print_noops(runs, err)

    def announce(name: str) -> None:
        err.print(
            f"[yellow]{name}[/yellow]: stopping the traffic, keeping what was "
            "recorded, tearing down (Ctrl-C again to abort)"
        )

    live = None
    if args.live and not console.is_terminal:
        err.print(
            "--live: standard output is not a terminal, so the live view cannot be drawn; "
            "showing the progress bar instead"
        )
    elif args.live:
        from experiments.orchestration.live_view import LiveScreen

        live = LiveScreen(console)
    progress: Any = None
    if live is not None:
        progress = live
    elif not args.quiet:
        progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )
    try:
        if progress is not None:
            with progress:
                outcomes = run_spec(
                    spec,
                    runs,
                    Path(args.out),
                    progress=progress,
                    announce=announce,
                    force=args.force,
                    max_dilation=args.max_dilation,
                    live=live,
                    min_dilation=args.min_dilation,
                )
        else:
            outcomes = run_spec(
                spec,
                runs,
                Path(args.out),
                announce=announce,
                force=args.force,
                max_dilation=args.max_dilation,
                min_dilation=args.min_dilation,
            )
    except RunBusy as exc:
        err.print(f"[red]refused:[/red] {escape(str(exc))}", soft_wrap=True)
        return EXIT_FAILED
    except EnvelopeExceeded as exc:
        for line in exc.lines:
            err.print(f"[red]does not fit this machine:[/red] {escape(line)}", soft_wrap=True)
        err.print(
            "nothing was built; kvfabric run SPEC --dry-run shows the demand, --force "
            "runs it anyway (the results say 'envelope: exceeded')",
            soft_wrap=True,
        )
        return EXIT_REFUSED
    except ResultsError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True)
        return EXIT_USAGE
    compare = None
    if len(outcomes) > 1:
        from experiments.output.report import write_report

        compare = write_report([o.path for o in outcomes])
        if not args.json:
            console.print(f"comparison report: {compare}", soft_wrap=True)
    complete = len(outcomes) == len(runs) and all(o.ok for o in outcomes)
    code = EXIT_OK if complete else EXIT_FAILED
    if args.json:
        print_json(outcomes_json(spec.name, outcomes, len(runs), compare, code))
    else:
        _print_outcomes(outcomes, console, args.quiet)
    return code


def outcomes_json(
    name: str, outcomes: list[Any], planned: int, compare: Path | None, code: int
) -> dict[str, Any]:
    """``kvfabric run --json``: each run's directory, state, verdict and headline
    latencies (ms), the comparison report of a sweep and the exit code."""
    rows = []
    for o in outcomes:
        s, m = o.summary, o.summary.get("metrics") or {}
        rows.append(
            {
                "label": s.get("label", o.path.name),
                "path": o.path,
                "report": o.path / "report.md",
                "state": "done" if o.ok else ("partial" if s.get("partial") else "failed"),
                "faithful": (s.get("fidelity") or {}).get("ok"),
                "error": s.get("error"),
                "metrics": {
                    f"{key} {q}": (m.get(key) or {}).get(q)
                    for key in ("fct_ms", "ttft_ms", "itl_ms", "kv_transfer_ms")
                    for q in ("p50", "p99")
                    if m.get(key)
                },
            }
        )
    return {
        "experiment": name,
        "runs": rows,
        "planned_runs": planned,
        "comparison_report": compare,
        "exit_code": code,
    }


def _dry_run(spec: Any, runs: list[Any], force: bool, dilations: tuple[float, float]) -> int:
    """Each run's demand, time dilation and wall time, built nothing; exit 3 when the
    run itself would be refused (a run over the envelope, without ``--force``).
    ``dilations``: ``auto``'s (least, most)."""
    from experiments.orchestration.runner import prepare

    low, high = dilations
    prepared = prepare(spec, runs, force=True, max_dilation=high, min_dilation=low)
    for p in prepared:
        _print_demand(p, console)
        _print_transport([(p.run.config, p.deployment.scale)], console, p.run.label)
        _print_noops([p.run], console, p.run.label)
        c = p.run.config.cluster
        if c is not None and (c.servers or c.local):
            _print_cluster(p)
    console.print(
        f"envelope: {prepared[0].envelope.source}" if prepared else "no runs", soft_wrap=True
    )
    if prepared:
        wall = sum(p.chosen.wall_s for p in prepared)
        say(f"wall time of the traffic, all runs: {wall:g} s")
    over = [p.run.label for p in prepared if p.forced]
    if not over:
        return EXIT_OK
    if force:
        say(f"{len(over)} run(s) exceed the envelope; --force runs them anyway")
        return EXIT_OK
    err.print(
        f"[red]would be refused:[/red] {len(over)} of {len(prepared)} run(s) do not fit "
        f"this machine ({escape(', '.join(over))}); --force runs them anyway",
        soft_wrap=True,
    )
    return EXIT_REFUSED


def _dry_run_json(spec: Any, runs: list[Any], force: bool, dilations: tuple[float, float]) -> int:
    """``--dry-run --json``: what ``_dry_run`` prints, as one JSON object on stdout, with
    the exit code it returns (3: the run would be refused)."""
    from experiments.orchestration.runner import prepare

    low, high = dilations
    prepared = prepare(spec, runs, force=True, max_dilation=high, min_dilation=low)
    plan = dry_run_plan(prepared)
    over = [p.run.label for p in prepared if p.forced]
    code = EXIT_REFUSED if over and not force else EXIT_OK
    print_json({"experiment": spec.name, **plan, "force": force, "exit_code": code})
    return code


def dry_run_plan(prepared: list[Any]) -> dict[str, Any]:
    """Each prepared run's plan as data: its demand figures against the envelope, time
    dilation and wall time, what of TCP does not dilate and what would do nothing."""
    from experiments.orchestration.envelope import figures
    from experiments.orchestration.noops import noop_warnings
    from topologies.transport import dilation_warnings

    rows = []
    for p in prepared:
        plan, config, scale = p.plan, p.run.config, p.deployment.scale
        rows.append(
            {
                "label": p.run.label,
                "scheduled_messages": len(plan.schedule),
                "live_serving_driver": bool(plan.driver),
                "flow_size_scale": {f"workloads.{i}": k for i, k in plan.flow_size_scale.items()},
                "figures": [
                    {"name": f.name, "peak": f.peak, "limit": f.limit, "unit": f.unit, "fits": f.ok}
                    for f in figures(plan.demand, p.envelope, scale.d)
                ],
                "dilation": p.chosen.record(),
                "exceeded": list(plan.exceeded),
                "over_envelope": p.forced,
                "warnings": {
                    "transport": dilation_warnings(config.agents.cc, config.transport, scale),
                    "does_nothing": noop_warnings(config, p.fabric),
                },
                "cluster": _cluster_servers(config),
            }
        )
    return {
        "runs": rows,
        "envelope": prepared[0].envelope.source if prepared else None,
        "wall_s": sum(p.chosen.wall_s for p in prepared),
    }


def _cluster_servers(config: Any) -> list[str] | None:
    """The servers a cluster run spans (``None``: this machine alone)."""
    from experiments.orchestration.cluster import with_placeholders
    from experiments.spec.cluster import servers_of

    c = config.cluster
    if c is None or not (c.servers or c.local):
        return None
    return [str(s) for s in servers_of(with_placeholders(c))]


def _print_demand(p: Any, console: Console) -> None:
    """A run's demand table: each figure's peak over 100 ms windows against the envelope,
    per wall second at the run's time dilation, and what the dilation costs."""
    from experiments.orchestration.envelope import figures, window_text

    plan = p.plan
    what = f"{len(plan.schedule)} scheduled messages" + (
        ", a live serving driver" if plan.driver else ""
    )
    ks = ", ".join(f"workloads.{i}.flow_size_scale={k:g}" for i, k in plan.flow_size_scale.items())
    table = Table(title=f"{p.run.label}: {what}" + (f"; {ks}" if ks else ""))
    for col in ("figure", "peak (100 ms)", "limit", "unit", "fits"):
        table.add_column(col, justify="right" if col in ("peak (100 ms)", "limit") else "left")
    d = p.deployment.scale.d
    for f in figures(plan.demand, p.envelope, d):
        table.add_row(
            f.name,
            f"{f.peak:,.4g}",
            f"{f.limit:,.4g}",
            f.unit,
            "[green]yes[/green]" if f.ok else "[red]no[/red]",
        )
    console.print(table)
    say(p.chosen.describe() + ("" if d == 1 else f"; figures per wall second {window_text(d)}"))
    for line in plan.exceeded:
        console.print(f"[red]exceeded[/red]: {escape(line)}", soft_wrap=True)


def _print_noops(runs: list[Any], out: Console, label: str = "") -> None:
    """What the runs ask for that would do nothing (``orchestration.noops``): each line
    once, however many runs it applies to."""
    from experiments.orchestration.noops import noop_warnings

    lines = {}
    for run in runs:
        lines |= dict.fromkeys(noop_warnings(run.config, run.fabric()))
    where = f"{label}: " if label else ""
    for line in lines:
        out.print(f"[yellow]{escape(where)}does nothing[/yellow]: {escape(line)}", soft_wrap=True)


def _print_transport(runs: list[tuple[Any, Any]], out: Console, label: str = "") -> None:
    """What of TCP does not dilate at each run's time dilation (``topologies.transport``):
    each line once, however many runs it applies to. A dilation still ``auto`` is
    judged when the planner has chosen it."""
    from topologies.transport import dilation_warnings

    lines = {}
    for config, scale in runs:
        if not scale.auto:
            lines |= dict.fromkeys(dilation_warnings(config.agents.cc, config.transport, scale))
    where = f"{label}: " if label else ""
    for line in lines:
        out.print(f"[yellow]{escape(where)}transport[/yellow]: {escape(line)}", soft_wrap=True)


def _print_cluster(p: Any) -> None:
    """A run's placement on its cluster's servers and the plan's traffic across them."""
    from experiments.cli.topo_placement import print_placement
    from experiments.orchestration.cluster import cluster_placement, with_placeholders
    from experiments.orchestration.crossing import plan_cross_traffic
    from experiments.spec.cluster import AUTO, servers_of

    config = p.run.config
    cluster = with_placeholders(config.cluster)
    placement = cluster_placement(cluster, p.fabric, p.deployment.scale, p.envelope)
    servers = ", ".join(str(s) for s in servers_of(cluster))
    say(
        f"cluster: {len(cluster.servers)} servers ({escape(servers)}), cut links over "
        f"{cluster.link}; each judged by this machine's envelope"
    )
    auto = cluster.placement == AUTO
    print_placement(
        p.fabric,
        placement,
        plan_cross_traffic(placement, p.fabric, p.plan, config),
        chosen="balanced by capacity" if auto else "as cluster.placement gives it",
        fix="more cluster.servers, or a lower scale.bandwidth"
        if auto
        else "fewer of its nodes in cluster.placement, or a lower scale.bandwidth",
    )


def _stat(metrics: dict[str, Any], key: str, q: str) -> str:
    from experiments.analysis.metrics.stats import percentile_supported

    stats = metrics.get(key) or {}
    value, n = stats.get(q), stats.get("count")
    if isinstance(n, int) and not percentile_supported(q, n):
        return f"n too small (n={n})"
    return "–" if value is None else f"{value:.1f}"


def _print_outcomes(outcomes: list[Any], console: Console, quiet: bool) -> None:
    if quiet:
        for o in outcomes:
            state = "ok" if o.ok else ("partial" if o.summary.get("partial") else "failed")
            console.print(f"{o.path / 'report.md'} {state}")
        return
    serving = any((o.summary.get("metrics") or {}).get("ttft_ms") for o in outcomes)
    table = Table(title="runs (latencies in ms)")
    table.add_column("run", overflow="fold", ratio=3)
    for col in ("faithful", "FCT p50") if serving else ("faithful", "FCT p50", "FCT p99"):
        table.add_column(col, ratio=1)
    if serving:
        for col in ("TTFT p50", "ITL p99", "KV p50"):
            table.add_column(col, ratio=1)
    table.add_column("result", ratio=1)
    for o in outcomes:
        s, m = o.summary, o.summary.get("metrics") or {}
        fid = (s.get("fidelity") or {}).get("ok")
        row = [
            s.get("label", o.path.name).replace(",", ", "),
            "[green]yes[/green]" if fid else "[red]no[/red]",
            _stat(m, "fct_ms", "p50"),
        ]
        if not serving:
            row.append(_stat(m, "fct_ms", "p99"))
        if serving:
            row += [
                _stat(m, "ttft_ms", "p50"),
                _stat(m, "itl_ms", "p99"),
                _stat(m, "kv_transfer_ms", "p50"),
            ]
        state = "done" if o.ok else f"[red]{'partial' if s.get('partial') else 'failed'}[/red]"
        table.add_row(*row, state)
    console.print(table)
    for o in outcomes:
        if o.summary.get("error"):
            console.print(
                f"[red]{o.path.name}[/red]: {escape(str(o.summary['error']))}", soft_wrap=True
            )
        console.print(f"report: {o.path / 'report.md'}", soft_wrap=True)


def purpose(path: Path) -> str:
    """A bundled spec's topic: its leading comment's first sentence, up to a colon."""
    words = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        words.append(line.lstrip("#").strip())
    text = " ".join(words)
    first = re.match(r"(.+?[.?!])(\s|$)", text)
    sentence = first.group(1) if first else text
    return sentence.split(": ")[0].rstrip(".")


def bundled_list() -> list[dict[str, Any]]:
    """Every bundled experiment: its name, topic, and its handout and reference results
    (paths from the project root, ``None`` when it has none)."""
    rows = []
    for name in bundled_names():
        handout = HANDOUTS_DIR / f"{name}.md"
        ref = REFERENCE_DIR / name / "summary.json"
        rows.append(
            {
                "name": name,
                "topic": purpose(SPECS_DIR / f"{name}.yaml"),
                "spec": (SPECS_DIR / f"{name}.yaml").relative_to(ROOT),
                "handout": handout.relative_to(ROOT) if handout.exists() else None,
                "reference": ref.parent.relative_to(ROOT) if ref.exists() else None,
            }
        )
    return rows


def cmd_list(args: argparse.Namespace) -> int:
    if args.json:
        print_json(bundled_list())
        return EXIT_OK
    table = Table(title="bundled experiments (kvfabric run NAME)")
    table.add_column("name", no_wrap=True)
    table.add_column("handout", no_wrap=True)
    table.add_column("reference", no_wrap=True)
    table.add_column("topic")
    for name in bundled_names():
        handout = HANDOUTS_DIR / f"{name}.md"
        ref = REFERENCE_DIR / name / "summary.json"
        table.add_row(
            name,
            "yes" if handout.exists() else "–",
            "yes" if ref.exists() else "–",
            purpose(SPECS_DIR / f"{name}.yaml"),
        )
    console.print(table)
    console.print(
        f"handouts: {HANDOUTS_DIR.relative_to(ROOT)}/NAME.md · "
        f"reference results: {REFERENCE_DIR.relative_to(ROOT)}/NAME/"
    )
    return EXIT_OK


def cmd_cli(args: argparse.Namespace) -> int:
    import tempfile

    from experiments.orchestration.runner import fabric_up, prepare
    from topologies.machine import preflight

    spec, runs = _spec_and_runs(args)
    if not _require_engine(runs[:1]):
        return EXIT_FAILED
    # the fabric shaped at the run's time dilation (auto: the one its plan would run at)
    (p,) = prepare(spec, runs[:1], force=True)
    run, fabric, deployment = p.run, p.fabric, p.deployment
    policy = run.config.controller.policy
    preflight()
    with (
        tempfile.TemporaryDirectory(prefix="kvf-cli-") as scratch,
        fabric_up(fabric, run.config, Path(scratch), deployment=deployment) as (proc, net, _),
    ):
        names = {h.name: net.mn(h.name).name for h in fabric.hosts}
        d = deployment.scale.d
        slowed = f", time dilation {d:g} (links shaped to 1/{d:g} of their rate)" if d != 1 else ""
        console.print(
            f"{spec.name}: {len(names)} hosts, policy {policy}{slowed}, run prefix "
            f"{net.prefix}. Mininet names: {json.dumps(names)[:400]}"
        )
        console.print("controller status: " + json.dumps(proc.client.status())[:300])
        net.interact()
    return EXIT_OK
