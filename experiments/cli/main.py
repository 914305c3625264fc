"""The ``kvfabric`` command line. Exit codes: 0 ok; 1 a failed run, a missing
capability, or a fabric parameter or scale out of range in ``topo show`` and
``demo`` (one line naming it and the command that shows what is allowed);
2 bad input to ``run``, ``cli``, ``report`` or ``calc`` (a spec, an argument,
a run directory) and arguments argparse rejects."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from topologies import Fabric, FabricError, defaults, make_fabric
from topologies.generators import GENERATORS, parse_param
from topologies.shaping import (
    check_scale,
    egress_plan,
    emulated_rate_bps,
    switch_capacity_mbps,
    switching_demand_mbps,
)

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
# Commands whose FabricError is "a parameter out of range" (exit 1); for run,
# cli and report it is bad input (exit 2).
FABRIC_COMMANDS = ("topo", "demo")
TOPO_HINT = "see 'kvfabric topo list' for each fabric's parameters and defaults"
console = Console(stderr=False)
err = Console(stderr=True, soft_wrap=True)  # an error is one line, however long


class UsageError(Exception):
    """Bad input from the user: exit code 2."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kvfabric", description=__doc__)
    p.add_argument("--verbose", "-v", action="store_true", help="log what is being done")
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser("doctor", help="what this machine can emulate, and what to install")
    d.add_argument("--json", action="store_true")

    t = sub.add_parser("topo", help="fabrics as data")
    tsub = t.add_subparsers(dest="topo_command", required=True)
    tsub.add_parser("list", help="fabric kinds and their parameters")
    ts = tsub.add_parser("show", help="one fabric: counts, links, oversubscription, bisection")
    ts.add_argument("kind", help=f"one of {', '.join(GENERATORS)}")
    ts.add_argument("params", nargs="*", metavar="k=v", help="generator parameters")
    ts.add_argument("--scale", default="1e-4", help="bandwidth scale in (0, 1] (default 1e-4)")
    ts.add_argument("--json", action="store_true")

    c = sub.add_parser("clean", help="remove leftovers of kvfabric runs only")
    c.add_argument("--force", action="store_true", help="also runs whose owner is alive")

    calc = sub.add_parser("calc", help="back-of-envelope numbers")
    csub = calc.add_subparsers(dest="calc_command", required=True)
    kv = csub.add_parser("kv", help="KV-cache bytes of a prompt and its transfer time")
    kv.add_argument("--model", required=True)
    kv.add_argument("--tokens", type=int, required=True)
    kv.add_argument("--dtype", choices=["fp16", "int8"], default="fp16")
    kv.add_argument("--link-gbps", type=float, default=400.0, help="real link rate (400)")
    pre = csub.add_parser("prefill", help="prefill time of a prompt, by part, and its model")
    pre.add_argument("--tokens", type=int, required=True, help="prompt tokens")
    dec = csub.add_parser("decode", help="one decode step's time, by part, and its model")
    dec.add_argument("--batch", type=int, required=True, help="sequences in the batch")
    dec.add_argument("--context", type=int, required=True, help="KV tokens of the whole batch")
    dec.add_argument("--kv-dtype", choices=["fp16", "int8", "fp8"], default="fp16")
    for step in (pre, dec):
        step.add_argument("--model", required=True)
        step.add_argument("--gpu", required=True)
        step.add_argument("--tp", type=int, default=1, help="tensor-parallel degree (1)")
        step.add_argument("--efficiency", type=float, default=0.5,
                          help="fraction of peak for the analytic terms (0.5)")  # fmt: skip
        step.add_argument("--roofline", action="store_true",
                          help="the roofline even where a profile exists")  # fmt: skip
        step.add_argument("--json", action="store_true")

    demo = sub.add_parser("demo", help="build the default rail-optimized fabric and measure it")
    demo.add_argument("--scale", default="1e-4", help="bandwidth scale in (0, 1] (1e-4)")
    demo.add_argument("--seconds", type=float, default=5.0)

    from experiments.cli.run import add_parsers

    add_parsers(sub)

    rep = sub.add_parser("report", help="report.md and plots of runs; several side by side")
    rep.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="results/<experiment>/<id>")
    rep.add_argument("--out", metavar="DIR", help="where to write (default: the run, or "
                     "<first run's parent>/compare-<timestamp> for several)")  # fmt: skip
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
    try:
        return COMMANDS[args.command](args)
    except FabricError as exc:
        return _error("error", exc, EXIT_FAILED if args.command in FABRIC_COMMANDS else EXIT_USAGE)
    except (UsageError, ValueError) as exc:
        return _error("error", exc, EXIT_USAGE)
    except KeyboardInterrupt:
        err.print("[yellow]interrupted[/yellow]: everything this run created was removed")
        return EXIT_FAILED
    except Exception as exc:  # a failed run: one clear line, the cause logged with -v
        from topologies.system import EnvironmentProblem

        logging.getLogger("kvfabric").debug("failure", exc_info=True)
        label = "cannot run" if isinstance(exc, EnvironmentProblem) else "failed"
        return _error(label, exc, EXIT_FAILED)


def _error(label: str, exc: BaseException, code: int) -> int:
    err.print(f"[red]{label}:[/red] {escape(str(exc))}", highlight=False)
    return code


def _sigterm_as_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def cmd_doctor(args: argparse.Namespace) -> int:
    from topologies.system import QDISC_PROBES, capabilities

    caps = capabilities()
    if args.json:
        print(json.dumps(caps.as_json(), indent=2))
        return EXIT_OK if caps.ok else EXIT_FAILED
    table = Table(title="kvfabric doctor", show_header=True)
    table.add_column("capability")
    table.add_column("here")
    for name, value in caps.as_json()["capabilities"].items():
        if isinstance(value, list):
            shown = ", ".join(value)
        elif value is None:
            shown = "[dim]not probed[/dim]" if name in (*QDISC_PROBES, "ovs") else "–"
        else:
            shown = {True: "[green]yes[/green]", False: "[yellow]no[/yellow]"}.get(value, value)
        table.add_row(name, str(shown))
    console.print(table)
    if not caps.root:
        say("qdiscs and Open vSwitch were not probed: that needs root (sudo kvfabric doctor)")
    for fix in caps.optional_fixes:
        say(f"[yellow]optional[/yellow]: {fix}")
    if caps.ok:
        dp = "kernel" if caps.ovs_kernel_datapath else "userspace"
        say(f"[green]ok[/green]: this machine can emulate a fabric ({dp} datapath)")
        return EXIT_OK
    for fix in caps.fixes:
        say(f"[red]missing[/red]: {fix}")
    return EXIT_FAILED


def say(line: str) -> None:
    """One message line on stdout, never wrapped (tables still wrap)."""
    console.print(line, soft_wrap=True, highlight=False)


def _fabric_from_args(kind: str, params: list[str]) -> Fabric:
    values = {}
    for item in params:
        if "=" not in item:
            raise FabricError(f"{kind}: parameter {item!r} must look like name=value")
        name, text = item.split("=", 1)
        values[name] = parse_param(kind, name, text)
    return make_fabric(kind, **values)


def _scale(text: str) -> float:
    """``--scale`` checked as the builder checks it, as one line with the fix."""
    try:
        return check_scale(float(text))
    except (ValueError, FabricError):
        raise FabricError(
            f"--scale {text} is not allowed: must be a number in (0, 1], "
            "e.g. --scale 1e-4 (the default: a 400 Gbit/s link runs at 40 Mbit/s)"
        ) from None


def _unhonoured(fabric: Fabric, scale: float) -> str | None:
    """The builder's refusal for the first link it cannot shape at ``scale``, or None."""
    try:
        egress_plan(fabric, scale)
    except FabricError as exc:
        return str(exc).replace("scale.bandwidth", "--scale")  # the builder speaks spec
    return None


def _topo_list() -> int:
    table = Table(title="fabric kinds (kvfabric topo show KIND k=v ...)")
    table.add_column("kind")
    table.add_column("parameters (defaults)")
    table.add_column("what")
    for kind, gen in GENERATORS.items():
        params = " ".join(f"{k}={v:g}" for k, v in defaults(kind).items())
        doc = " ".join((gen.__doc__ or "").split())
        table.add_row(kind, params, doc.split(". ")[0].rstrip("."))
    console.print(table)
    say("rates (*_gbps) are real-equivalent Gbit/s, buffers packets; --scale S emulates "
        "a rate R at R x S (kvfabric topo show KIND --scale S)")  # fmt: skip
    return EXIT_OK


def cmd_topo(args: argparse.Namespace) -> int:
    if args.topo_command == "list":
        return _topo_list()
    scale = _scale(args.scale)
    try:
        fabric = _fabric_from_args(args.kind, args.params)
    except FabricError as exc:
        raise FabricError(f"{exc} ({TOPO_HINT})") from None
    info = fabric.summary()
    demand = switching_demand_mbps(fabric, scale)
    capacity = switch_capacity_mbps()
    problem = _unhonoured(fabric, scale)
    if problem is None and demand > capacity:
        problem = (
            f"{demand:.0f} Mbit/s of switch-hop work at line rate exceeds this machine's "
            f"{capacity:.0f} (lower --scale; KVFABRIC_SWITCH_CAPACITY_MBPS sets the figure)"
        )
    info.update(
        scale=scale,
        emulated_mbps_by_real_gbps={
            f"{g:g}": emulated_rate_bps(g, scale) / 1e6
            for g in sorted({lk.real_gbps for lk in fabric.links})
        },
        switching_demand_mbps=round(demand, 1),
        switch_capacity_mbps=capacity,
        fits=problem is None,
        problem=problem,
    )
    if args.json:
        print(json.dumps(info, indent=2))
        return EXIT_OK
    table = Table(title=f"{fabric.kind} " + " ".join(f"{k}={v}" for k, v in fabric.params.items()))
    table.add_column("what")
    table.add_column("value", justify="right")
    table.add_row("hosts (GPUs)", str(info["hosts"]))
    table.add_row("switches", str(info["switches"]))
    for kind, n in info["links_by_kind"].items():
        if n:
            table.add_row(f"{kind} links", str(n))
    table.add_row("max oversubscription", f"{info['max_oversubscription']:.3g}:1")
    table.add_row("bisection (real)", f"{info['bisection_gbps']:g} Gbit/s")
    table.add_row("mean switches per path", f"{info['mean_switch_hops']:.2f}")
    for real, emu in info["emulated_mbps_by_real_gbps"].items():
        table.add_row(f"{real} Gbit/s link at scale {scale:g}", f"{emu:g} Mbit/s")
    fits = "[green]yes[/green]" if info["fits"] else "[red]no[/red]"
    table.add_row(
        "fits this machine", f"{fits} ({demand:.0f} of {capacity:.0f} Mbit/s switch-hop capacity)"
    )
    console.print(table)
    if problem:
        say(f"[red]does not fit[/red]: {escape(problem)}")
    return EXIT_OK


def cmd_clean(args: argparse.Namespace) -> int:
    from topologies.cleanup import clean
    from topologies.system import is_root

    if not is_root():
        err.print("[red]error:[/red] kvfabric clean needs root (fix: sudo kvfabric clean)")
        return EXIT_FAILED
    removed, skipped = clean(force=args.force)
    for line in removed:
        say(f"removed {line}")
    for line in skipped:
        say(f"[yellow]kept[/yellow] {line}; --force removes it")
    if not removed:
        say("nothing of kvfabric's was left behind")
    return EXIT_OK


def cmd_calc(args: argparse.Namespace) -> int:
    from traffic.presets import format_kv_calc, kv_calc, model

    if args.calc_command in ("prefill", "decode"):
        return _calc_step(args)
    result = kv_calc(model(args.model), args.tokens, args.dtype, args.link_gbps)
    console.print(format_kv_calc(result), highlight=False)
    return EXIT_OK


def _calc_step(args: argparse.Namespace) -> int:
    from traffic import compute

    if args.calc_command == "prefill":
        step = compute.prefill_step(
            args.model, args.gpu, args.tokens, args.tp, args.efficiency, roofline=args.roofline
        )
        shape = {"tokens": args.tokens}
    else:
        step = compute.decode_step(
            args.model, args.gpu, args.context, args.tp, kv_dtype=args.kv_dtype,
            efficiency=args.efficiency, batch=args.batch, roofline=args.roofline,
        )  # fmt: skip
        shape = {"batch": args.batch, "context_tokens": args.context}
    result = {
        "step": args.calc_command,
        "model": args.model.lower(),
        "gpu": args.gpu.lower(),
        "tp": args.tp,
        **shape,
        "efficiency": args.efficiency,
        "compute_model": step.compute_model,
        "total_ms": step.total_s * 1e3,
        "linear_ms": step.linear_s * 1e3,
        "attention_ms": step.attention_s * 1e3,
        "collective_ms": step.collective_s * 1e3,
    }
    if step.compute_model == "profiled":
        result["profile"] = compute.profile_source() | {"model": step.profiled_as}
    if args.json:
        print(json.dumps(result, indent=2))
        return EXIT_OK
    console.print(_format_step(result), highlight=False, soft_wrap=True)
    return EXIT_OK


def _format_step(r: dict) -> str:
    profiled = r["compute_model"] == "profiled"
    if r["step"] == "prefill":
        shape = f"{r['tokens']:,} tokens"
        linear = "linear operators (profiled)" if profiled else "2 x params FLOPs"
        attention = "causal attention FLOPs" if profiled else "attention (not modelled)"
        collective = "TP all-reduces (profiled)" if profiled else "TP all-reduces (not modelled)"
        analytic = "attention"
    else:
        shape = f"batch {r['batch']}, {r['context_tokens']:,} context tokens"
        linear = "linear operators (profiled)" if profiled else "weight read"
        attention = "KV read"
        collective = "all-reduce (sent as packets)"
        analytic = "KV read" if profiled else "weight and KV read"
    rows = [
        (r["step"], f"{r['model']} on {r['gpu']}, tp {r['tp']}, {shape}"),
        ("compute model", r["compute_model"]),
        (linear, f"{r['linear_ms']:.3f} ms"),
        (attention, f"{r['attention_ms']:.3f} ms"),
        (collective, f"{r['collective_ms']:.3f} ms"),
        ("step time", f"{r['total_ms']:.3f} ms"),
        ("efficiency", f"{r['efficiency']:g} of peak ({analytic if profiled else 'all'})"),
    ]
    if profiled:
        source = r["profile"]["source"].removeprefix("https://github.com/")
        of = r["profile"]["model"]
        borrowed = "" if of == r["model"] else f", {of}'s (same layer shapes)"
        rows.append(("profile", f"{source} @ {r['profile']['commit'][:12]}{borrowed}"))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def cmd_demo(args: argparse.Namespace) -> int:
    from experiments.cli.demo import run_demo
    from topologies import rail_optimized
    from topologies.system import preflight

    scale = _scale(args.scale)
    problem = _unhonoured(rail_optimized(), scale)  # the fabric run_demo builds
    if problem:
        raise FabricError(
            f"{problem} (every link: kvfabric topo show rail_optimized --scale {scale:g})"
        )
    if not args.seconds > 0:
        raise FabricError(f"--seconds {args.seconds:g} is not allowed: must be > 0, e.g. 5")
    preflight()  # root, Mininet, OVS, htb and pfifo: one line before anything is built
    return run_demo(console, scale=scale, seconds=args.seconds)


def cmd_report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from experiments.output.report import write_report
    from experiments.output.results import NotARunError

    try:
        path = write_report([Path(d) for d in args.run_dirs], Path(args.out) if args.out else None)
    except NotARunError as exc:
        raise UsageError(str(exc)) from None
    print(path)
    return EXIT_OK


COMMANDS = {
    "doctor": cmd_doctor,
    "topo": cmd_topo,
    "clean": cmd_clean,
    "calc": cmd_calc,
    "demo": cmd_demo,
    "report": cmd_report,
    "run": lambda args: _run_cmd("cmd_run", args),
    "list": lambda args: _run_cmd("cmd_list", args),
    "cli": lambda args: _run_cmd("cmd_cli", args),
}


def _run_cmd(name: str, args: argparse.Namespace) -> int:
    from experiments.cli import run as cli_run

    return getattr(cli_run, name)(args, console, err)


if __name__ == "__main__":
    sys.exit(main())
