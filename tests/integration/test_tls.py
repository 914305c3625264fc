"""OpenFlow over TLS on a real fabric: the switches reach the controller through the
run's CA, nothing answers OpenFlow in plain TCP, and the PKI and Open vSwitch's SSL
setting are gone after the run."""

from __future__ import annotations

import json
import socket
import subprocess
import textwrap

import pandas as pd
import pytest

from experiments.cli.main import main
from experiments.orchestration.deployment import Deployment
from experiments.orchestration.runner import fabric_up
from experiments.spec.load import expand, load_spec

pytestmark = pytest.mark.root

SPEC = textwrap.dedent(
    """
    name: tls
    duration_s: 3
    fabric: {kind: spine_leaf, spines: 2, leaves: 2, hosts_per_leaf: 2}
    controller: {policy: ecmp, tls: true}
    workloads:
      - {kind: probe, pairs: [[h0, h2], [h1, h3]], rate_hz: 50, size_bytes: 200}
    """
)

OFP_HELLO = bytes([4, 0, 0, 8, 0, 0, 0, 1])  # OpenFlow 1.3 hello


def _ssl_setting() -> str:
    return subprocess.run(["ovs-vsctl", "get-ssl"], capture_output=True, text=True).stdout


def test_switches_reach_the_controller_over_tls_only_and_nothing_of_it_remains(tmp_path):
    spec_path = tmp_path / "tls.yaml"
    spec_path.write_text(SPEC)
    run = expand(load_spec(spec_path))[0]
    fabric = run.fabric()
    deployment = Deployment.of(fabric, run.config.scale)
    with fabric_up(fabric, run.config, tmp_path / "scratch", deployment=deployment) as (
        proc,
        net,
        _,
    ):
        status = proc.client.status()
        assert status["ready"], status  # every switch connected and acknowledged its rules
        targets = subprocess.run(
            ["ovs-vsctl", "get-controller", net.bridge("leaf0")], capture_output=True, text=True
        ).stdout
        assert targets.strip() == f"ssl:127.0.0.1:{proc.port}"
        folder = proc.tls.folder
        assert str(folder / "switch.key") in _ssl_setting()
        # a plain OpenFlow hello to the controller's port gets no OpenFlow answer
        with socket.create_connection(("127.0.0.1", proc.port), timeout=3) as s:
            s.sendall(OFP_HELLO)
            s.settimeout(3)
            try:
                answer = s.recv(64)
            except (TimeoutError, ConnectionResetError):
                answer = b""
        assert answer[:1] != b"\x04", answer  # not an OpenFlow 1.3 message
        out = net.mn("h0").cmd(f"ping -c 3 -i 0.2 -W 2 {fabric.node('h2').ip}")
        assert " 0% packet loss" in out, out  # routed by rules sent over TLS
    assert not folder.exists()
    assert "switch.key" not in _ssl_setting()


def test_a_tls_run_is_a_run_like_any_other(tmp_path):
    spec_path = tmp_path / "tls.yaml"
    spec_path.write_text(SPEC)
    assert main(["run", str(spec_path), "--out", str(tmp_path), "--quiet"]) in (0, 1)
    (summary,) = tmp_path.glob("tls/*/summary.json")
    result = json.loads(summary.read_text())
    assert result["error"] is None, result["error"]
    flows = pd.read_parquet(summary.parent / "flows.parquet")
    assert len(flows) == 300 and flows["ok"].all()  # 2 pairs x 50 Hz x 3 s
