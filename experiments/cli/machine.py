"""``kvfabric doctor`` (what this machine can emulate, what to install) and
``kvfabric clean`` (remove the leftovers of kvfabric's own runs, nothing else)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.table import Table

from experiments.cli.common import EXIT_FAILED, EXIT_OK, console, err, say


def add_parsers(sub: Any) -> None:
    d = sub.add_parser("doctor", help="what this machine can emulate, and what to install")
    d.add_argument("--json", action="store_true")
    d.set_defaults(handler=cmd_doctor)

    c = sub.add_parser("clean", help="remove leftovers of kvfabric runs only")
    c.add_argument("--force", action="store_true", help="also runs whose owner is alive")
    c.set_defaults(handler=cmd_clean)


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
