"""Workers started through a command prefix and controlled over the authenticated TCP
channel, on 127.0.0.1: the launcher's side (start, status, stop, the stdin lifeline)
and a fleet whose hosts are served partly from such a site."""

from __future__ import annotations

import socket
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.unit.test_agent_loopback import CC, LoopbackNet, stopped
from topologies.cluster.ssh import Server
from topologies.scale import Scale
from traffic.agents import AgentFleet, FleetError
from traffic.agents.launcher import Workers
from traffic.agents.sites import WorkerSite
from traffic.workloads import incast


class Behind:
    """A command prefix that, like ssh, runs the worker as the child of another process."""

    def command(self, args: Sequence[str]) -> list[str]:
        return ["sh", "-c", '"$@"; exit $?', "sh", *args]


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def refuses_connections(address: tuple[str, int]) -> bool:
    try:
        socket.create_connection(address, timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def site_workers(tmp_path: Path, prefix: object) -> Workers:
    spec = {"name": "h0", "ip": "127.0.0.31", "netns": None}
    return Workers(
        tmp_path / "agents",
        [[spec]],
        CC,
        "persistent",
        "normal",
        sites=[WorkerSite(prefix, "127.0.0.1")],
    )


def test_a_worker_behind_a_prefix_answers_over_tcp_and_is_gone_once_stopped(tmp_path):
    workers = site_workers(tmp_path, Behind())
    try:
        workers.start()
        w = workers.all[0]
        pong = w.client.request("ping")
        assert pong["hosts"] == ["h0"] and pong["pid"] != w.proc.pid  # served from behind sh
        assert w.client.request("status")["rows"] == 0
        assert isinstance(w.control, tuple) and w.control[0] == "127.0.0.1"
    finally:
        workers.close()
    assert w.proc.poll() is not None
    assert gone_within(pong["pid"], 5), "the worker outlived its launcher"
    assert refuses_connections(w.control)


def test_closing_the_workers_stdin_ends_it(tmp_path):
    workers = site_workers(tmp_path, Server("localhost"))
    try:
        workers.start()
        w = workers.all[0]
        pid = w.client.request("ping")["pid"]
        w.proc.stdin.close()  # what the remote side sees when ssh ends
        assert w.proc.wait(timeout=5) == 0
        assert not alive(pid)
    finally:
        workers.close()


def test_a_site_whose_worker_never_starts_is_named(tmp_path):
    class Broken:
        def command(self, args: Sequence[str]) -> list[str]:
            return ["sh", "-c", "echo no python here >&2; exit 7"]

    workers = site_workers(tmp_path, Broken())
    try:
        with pytest.raises(FleetError, match=r"h0 exited with code 7.*no python here"):
            workers.start()
    finally:
        workers.close()


def test_a_fleet_served_partly_from_a_site_runs_its_incast(tmp_path):
    net = LoopbackNet(4)
    site = WorkerSite(Behind(), "127.0.0.1")
    schedule = incast("h0", ["h1", "h2", "h3"], 20_000_000, 3)
    with AgentFleet(
        net,
        tmp_path,
        schedule,
        Scale(1e-3),
        cc=CC,
        processes=1,
        priority="normal",
        sites={"h2": site, "h3": site},
    ) as fleet:
        flows = fleet.run(timeout_s=20)
        controls = {w.name: (w.hosts, w.control) for w in fleet.workers.all}
    assert stopped(fleet), "an agent outlived the fleet"
    assert flows["ok"].all(), flows.loc[~flows["ok"], "error"].tolist()
    assert len(flows) == len(schedule) and (flows["bytes"] == 20_000).all()
    (local_hosts, local), (site_hosts, remote) = controls.values()
    assert local_hosts == ["h0", "h1"] and isinstance(local, str)  # a Unix socket, as before
    assert site_hosts == ["h2", "h3"] and isinstance(remote, tuple)


def test_sites_for_hosts_the_fabric_lacks_are_refused(tmp_path):
    site = WorkerSite(Behind(), "127.0.0.1")
    with pytest.raises(ValueError, match="h9"):
        AgentFleet(
            LoopbackNet(2),
            tmp_path,
            incast("h0", ["h1"], 1000, 1),
            Scale(1e-3),
            cc=CC,
            sites={"h9": site},
        )


def test_a_sites_rows_go_over_in_parts_and_its_records_come_back_in_the_reply(
    tmp_path, monkeypatch
):
    import traffic.agents.fleet as fleet_module

    monkeypatch.setattr(fleet_module, "LOAD_PART", 2)  # 6 rows of the site: 3 parts
    site = WorkerSite(Behind(), "127.0.0.1")
    schedule = incast("h0", ["h1", "h2", "h3"], 20_000, 3)
    with AgentFleet(
        LoopbackNet(4),
        tmp_path,
        schedule,
        Scale(1e-3),
        cc=CC,
        processes=1,
        priority="normal",
        sites={"h2": site, "h3": site},
    ) as fleet:
        flows = fleet.run(timeout_s=20)
        status = fleet.status()
    assert flows["ok"].all() and len(flows) == 9, flows.loc[~flows["ok"], "error"].tolist()
    assert status["worker-1"]["rows"] == 6  # every part loaded, none replaced another
    kept = (tmp_path / "agents" / "worker-1.records.json").read_text()
    assert '"hosts":["h2","h3"]' in kept  # the reply's records, kept here as a local one's
