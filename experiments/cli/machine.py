"""``kvfabric doctor`` (what this machine can emulate, what to install, the envelope
that judges its runs), ``kvfabric calibrate`` (measure that envelope here) and
``kvfabric clean`` (remove the leftovers of kvfabric's own runs, nothing else)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.table import Table

from experiments.cli.common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, console, err, say


def add_parsers(sub: Any) -> None:
    d = sub.add_parser("doctor", help="what this machine can emulate, and what to install")
    d.add_argument("--json", action="store_true")
    d.add_argument(
        "--cluster",
        metavar="USER@HOST,...",
        help="check these servers instead (ssh, root, Mininet, Open vSwitch, "
        "VXLAN, the code, the underlay MTU, clock offsets)",
    )
    d.set_defaults(handler=cmd_doctor)

    cal = sub.add_parser(
        "calibrate", help="measure what this machine emulates faithfully (root, minutes)"
    )
    cal.add_argument(
        "--quick", action="store_true", help="steps of 3 s, the gap narrowed once (about 2 minutes)"
    )
    cal.add_argument(
        "--mtu",
        type=int,
        default=1500,
        help="measure with jumbo frames (runs with this scale.mtu use it)",
    )
    cal.add_argument(
        "--out",
        metavar="FILE",
        help="where to store it (default: /var/lib/kvfabric/envelope.json, "
        "or $KVFABRIC_ENVELOPE; envelope-mtuN.json beside it "
        "for --mtu N)",
    )
    cal.add_argument(
        "--fabric",
        metavar="SPEC",
        help="measure the switch-hop and message figures on this fabric (a spec with "
        "fabric:, or a name of experiments/bmwg/fabrics) and store them beside the "
        "machine's: runs on a fabric of its shape are judged by them (a large fabric "
        "costs OVS more per packet than the small ones the machine's are measured on)",
    )
    cal.set_defaults(handler=cmd_calibrate)

    c = sub.add_parser("clean", help="remove leftovers of kvfabric runs only")
    c.add_argument("--force", action="store_true", help="also runs whose owner is alive")
    c.set_defaults(handler=cmd_clean)


def cmd_doctor(args: argparse.Namespace) -> int:
    from topologies.machine import QDISC_PROBES, capabilities

    if args.cluster:
        return _doctor_cluster(args)
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
    _say_envelope()
    if caps.ok:
        dp = "kernel" if caps.ovs_kernel_datapath else "userspace"
        say(f"[green]ok[/green]: this machine can emulate a fabric ({dp} datapath)")
        return EXIT_OK
    for fix in caps.fixes:
        say(f"[red]missing[/red]: {fix}")
    return EXIT_FAILED


def _doctor_cluster(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from topologies.cluster.probe import check_cluster
    from topologies.cluster.ssh import parse_servers

    servers = parse_servers(args.cluster)
    rows = check_cluster(servers, progress=lambda line: err.print(line, highlight=False))
    ok = not any(r.fails for r in rows)
    if args.json:
        print(json.dumps({"ok": ok, "rows": [asdict(r) for r in rows]}, indent=2))
        return EXIT_OK if ok else EXIT_FAILED
    marks = {True: "[green]ok[/green]", False: "[red]FAIL[/red]", None: "[dim]–[/dim]"}
    for server in servers:
        table = Table(title=f"kvfabric doctor: {server}", show_header=True)
        for column in ("check", "", "found"):
            table.add_column(column)
        for r in (r for r in rows if r.server == str(server)):
            mark = marks[r.ok] if r.required else "[yellow]warn[/yellow]" if r.fix else "info"
            table.add_row(r.check, mark, r.shown)
        console.print(table)
    for r in rows:
        if r.fix:
            level = "[red]fix[/red]" if r.fails else "[yellow]optional[/yellow]"
            say(f"{level} {r.server} {r.check}: {r.fix}")
    if ok:
        say(f"[green]ok[/green]: all {len(servers)} servers can carry a fabric")
        return EXIT_OK
    bad = sorted({r.server for r in rows if r.fails}, key=[str(s) for s in servers].index)
    say(f"[red]not ready[/red]: {', '.join(bad)}")
    return EXIT_FAILED


def cmd_clean(args: argparse.Namespace) -> int:
    from topologies.cleanup import clean
    from topologies.machine import is_root

    if not is_root():
        err.print("[red]error:[/red] kvfabric clean needs root (fix: sudo kvfabric clean)")
        return EXIT_FAILED
    removed, skipped = clean(force=args.force)
    for line in removed:
        say(f"removed {line}")
    for line in skipped:
        say(f"[yellow]kept[/yellow] {line}")
    if not removed:
        say("nothing of kvfabric's was left behind")
    return EXIT_OK


def _say_envelope() -> None:
    from experiments.orchestration.envelope import envelope_path, load, machine_identity

    base = envelope_path()
    tails = [f.stem.rsplit("-mtu", 1)[1] for f in base.parent.glob(f"{base.stem}-mtu*.json")]
    jumbo = sorted(int(t) for t in tails if t.isdigit())
    for mtu in [1500, *jumbo]:
        env, why = load(machine_identity(mtu=mtu))
        hop = ", ".join(f"{n} switches {v:,.0f}" for n, v in sorted(env.switch_hop_mbps.items()))
        msgs = ", ".join(f"{c} {v:,.0f}" for c, v in env.messages_per_s.items())
        at = "" if mtu == 1500 else f" at MTU {mtu}"
        say(f"envelope{at}: switch-hop Mbit/s: {hop}; message-hops/s: {msgs}")
        hint = "" if env.calibrated else "; sudo kvfabric calibrate measures this machine"
        say(f"  ({why}{hint})")
    for own in sorted(base.parent.glob(f"{base.stem}-fabric-*.json")):
        try:
            doc = json.loads(own.read_text())
            hop = ", ".join(f"{n} switches {v:,.0f}" for n, v in doc["switch_hop_mbps"].items())
            say(f"envelope of one fabric ({own.name}): switch-hop Mbit/s: {hop}")
            say(f"  ({doc['source']})")
        except (OSError, ValueError, KeyError) as exc:
            say(f"envelope of one fabric ({own.name}): unreadable: {exc}")


def cmd_calibrate(args: argparse.Namespace) -> int:
    from pathlib import Path

    from experiments.orchestration.calibrate import CalibrationError, calibrate
    from experiments.orchestration.envelope import envelope_path, save
    from experiments.orchestration.runtime import RunLock
    from topologies.machine import preflight
    from topologies.scale import check_mtu

    check_mtu(args.mtu, "--mtu")
    section = None
    target = Path(args.out) if args.out else envelope_path(args.mtu)
    if args.fabric:
        import yaml

        from experiments.bmwg.suite import read_fabric
        from experiments.orchestration.calibrate import make_fabric
        from experiments.orchestration.envelope import fabric_envelope_path
        from experiments.spec.schema import SpecError

        try:
            section = read_fabric(args.fabric).raw["fabric"]
        except (OSError, ValueError, yaml.YAMLError, SpecError) as exc:  # FabricError too
            err.print(f"[red]--fabric {args.fabric}:[/red] {exc}")
            return EXIT_USAGE
        if not args.out:
            target = fabric_envelope_path(make_fabric(section), args.mtu)
    preflight()
    with RunLock("calibrate"):
        try:
            env, record = calibrate(quick=args.quick, say=say, mtu=args.mtu, fabric_section=section)
        except CalibrationError as exc:
            err.print(f"[red]not calibrated:[/red] {exc}; the envelope at {target} is unchanged")
            return EXIT_FAILED
    path = save(env, target, record)
    hop = ", ".join(f"{n}: {v:,.0f}" for n, v in sorted(env.switch_hop_mbps.items()))
    say(
        f"switch-hop Mbit/s by switches per path {hop}; message-hops/s "
        + ", ".join(f"{c}: {v:,.0f}" for c, v in env.messages_per_s.items())
    )
    if section is not None and not args.out:
        judged = "kvfabric run now judges plans on a fabric of this shape by it"
    elif path == envelope_path(args.mtu):
        judged = "kvfabric run now judges plans by it"
    else:
        judged = f"runs judge by it with KVFABRIC_ENVELOPE={path}"
    say(f"stored in {path} ({record['wall_s']:.0f} s); {judged}")
    return EXIT_OK
