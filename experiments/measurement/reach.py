"""Reachability of a running fabric: one ping per ordered host pair."""

from __future__ import annotations

from typing import Any


def all_pairs_ping(net: Any, timeout_s: int = 1) -> dict[tuple[str, str], bool]:
    """Ping every other host from every host (one packet each). Each host's pings run as
    one ``bash -c`` script outside its shell's terminal, whose line limit (4,095 bytes)
    would cut the script of a host with more than about 50 peers."""
    hosts = [h.name for h in net.fabric.hosts]
    result: dict[tuple[str, str], bool] = {}
    for src in hosts:
        targets = [(dst, net.fabric.node(dst).ip) for dst in hosts if dst != src]
        script = "; ".join(
            f"ping -c1 -W{timeout_s} -q {ip} >/dev/null 2>&1 && echo {dst} ok || echo {dst} fail"
            for dst, ip in targets
        )
        out, _err, _code = net.mn(src).pexec("bash", "-c", script)
        answers = dict(line.split() for line in out.splitlines() if line.count(" ") == 1)
        for dst, _ip in targets:
            result[(src, dst)] = answers.get(dst) == "ok"
    return result
