"""One iperf3 transfer between two hosts of a running fabric (for the demo,
tests and benchmarks that compare against the tool engineers already trust)."""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass
from typing import Any

# TCP goodput over Ethernet framing as HTB counts it: 1448 payload bytes
# (MSS with timestamps) per 1514-byte frame.
TCP_GOODPUT_FRACTION = 1448 / 1514


@dataclass(frozen=True)
class Transfer:
    src: str
    dst: str
    seconds: float
    goodput_mbps: float
    retransmits: int
    raw: dict[str, Any]


def iperf3(
    net: Any,
    src: str,
    dst: str,
    seconds: float = 3.0,
    port: int = 5201,
    congestion: str = "cubic",
    parallel: int = 1,
) -> Transfer:
    """Run ``iperf3`` from fabric host ``src`` to ``dst``; the server process
    is started for this transfer and always stopped."""
    server = net.mn(dst).popen(
        ["iperf3", "-s", "-1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(0.3)
        dst_ip = net.fabric.node(dst).ip
        args = [
            "iperf3",
            "-c",
            dst_ip,
            "-p",
            str(port),
            "-t",
            str(seconds),
            "-J",
            "-C",
            congestion,
            "-P",
            str(parallel),
        ]
        client = net.mn(src).popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = client.communicate(timeout=seconds + 30)
        if client.returncode != 0:
            raise RuntimeError(f"iperf3 {src}->{dst} failed: {(err or out).decode()[:300]}")
        data = json.loads(out)
        end = data["end"]
        return Transfer(
            src,
            dst,
            seconds,
            end["sum_received"]["bits_per_second"] / 1e6,
            int(end["sum_sent"].get("retransmits", 0)),
            data,
        )
    finally:
        if server.poll() is None:
            server.kill()
        server.wait(timeout=10)
