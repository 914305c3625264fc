"""``kvfabric cluster local up N | down [PREFIX] | list``: emulated servers on this
machine (network + mount + UTS namespaces, each with its own sshd and Open vSwitch)
for trying a fabric spread over several machines, and for the tests of it."""

from __future__ import annotations

import argparse
from typing import Any

from experiments.cli.common import EXIT_FAILED, EXIT_OK, UsageError, err, say


def add_parsers(sub: Any) -> None:
    c = sub.add_parser("cluster", help="a local cluster of emulated servers (root)")
    csub = c.add_subparsers(dest="cluster_command", required=True)
    local = csub.add_parser("local", help="servers as namespaces on this machine")
    lsub = local.add_subparsers(dest="local_command", required=True)
    u = lsub.add_parser("up", help="start N servers and print the --cluster argument")
    u.add_argument("n", type=int, help="how many servers (1-16)")
    u.set_defaults(handler=cmd_up)
    d = lsub.add_parser("down", help="remove a local cluster (all of them if none is named)")
    d.add_argument("prefix", nargs="?", help="the cluster's name (kc.., from 'list')")
    d.set_defaults(handler=cmd_down)
    ls = lsub.add_parser("list", help="the local clusters and how to reach them")
    ls.set_defaults(handler=cmd_list)


def cmd_up(args: argparse.Namespace) -> int:
    from topologies.cluster.local import up

    rec = up(args.n, say=say)
    _show(rec)
    return EXIT_OK


def _show(rec: Any) -> None:
    plan = rec.plan()
    say(
        f"[green]local cluster {rec.prefix}[/green]: {len(rec.servers)} servers on "
        f"{rec.lan} (this machine is {plan.coordinator_address})"
    )
    say(f"  --cluster {plan.cluster_arg()}")
    say(f"  ssh: ssh -F {plan.ssh_config} root@{plan.servers[0].address}")
    say(f"  remove: sudo kvfabric cluster local down {rec.prefix}")


def cmd_down(args: argparse.Namespace) -> int:
    from topologies.cluster.local import cluster_records, down
    from topologies.machine import is_root

    if not is_root():
        err.print(
            "[red]error:[/red] removing a local cluster needs root "
            "(fix: sudo kvfabric cluster local down)"
        )
        return EXIT_FAILED
    records = cluster_records()
    chosen = [r for r in records if args.prefix in (None, r.prefix)]
    if args.prefix and not chosen:
        known = ", ".join(r.prefix for r in records) or "none"
        raise UsageError(f"no local cluster {args.prefix!r} (there are: {known})")
    for rec in chosen:
        down(rec, say=say)
    if not chosen:
        say("no local cluster to remove")
    return EXIT_OK


def cmd_list(args: argparse.Namespace) -> int:
    from topologies.cluster.local import cluster_records

    records = cluster_records()
    for rec in records:
        if rec.state == "up" and rec.holders_alive():
            _show(rec)
        else:
            say(
                f"[yellow]local cluster {rec.prefix}[/yellow]: {rec.state}, not running "
                "(sudo kvfabric clean removes it)"
            )
    if not records:
        say("no local cluster (sudo kvfabric cluster local up 2 starts one)")
    return EXIT_OK
