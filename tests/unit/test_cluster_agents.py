"""Where a cluster run's agents run (``agent_sites``, ``agents_where``) and what its
sweep removes of theirs on a server: pure, no root, no cluster."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from experiments.orchestration.cluster import RunCluster, agents_where, server_address
from topologies.cluster.ssh import Server
from topologies.cluster.sweep import agents_folder, sweep_script

A, B = Server("10.9.0.11"), Server("10.9.0.12")
HOSTS = ["h0", "h1", "h2", "h3"]


def _net(servers, machine_of):
    cluster = RunCluster(tuple(servers), machine_of, "vxlan", "10.9.0.1", placement=None)
    fabric = SimpleNamespace(hosts=[SimpleNamespace(name=h) for h in HOSTS])
    return SimpleNamespace(fabric=fabric, prefix="kfab"), cluster


CLOCK = {
    "root@10.9.0.11": {"monotonic": {"offset_ms": 12.5, "uncertainty_ms": 0.02}},
    "root@10.9.0.12": {"monotonic": {"offset_ms": -3.0, "uncertainty_ms": 0.02}},
}


def test_each_host_gets_its_servers_site_on_the_coordinators_clock():
    net, cluster = _net([A, B], {"h0": str(A), "h1": str(A), "h2": str(B), "h3": str(B)})
    sites, processes = agents_where(net, cluster, "auto", CLOCK)
    assert sites["h0"] is sites["h1"] and sites["h2"] is sites["h3"]  # one site per server
    assert sites["h0"].address == "10.9.0.11" and sites["h2"].address == "10.9.0.12"
    assert sites["h0"].clock_offset_ns == 12_500_000 and sites["h2"].clock_offset_ns == -3_000_000
    assert sites["h0"].spill_path("worker-0") == f"{agents_folder('kfab')}/worker-0.spill.jsonl"
    *ssh, dest, line = sites["h2"].argv(["--cc", "cubic"], "/repo")  # one line for ssh
    assert ssh[0] == "ssh" and dest == "root@10.9.0.12"
    assert line.endswith("--hosts - --control-tcp 10.9.0.12:0 --clock-offset-ns -3000000")
    assert processes == "auto"  # real machines: each has its own CPUs


def test_hosts_on_localhost_have_no_site_and_a_server_without_a_clock_is_refused():
    here = Server("localhost")
    net, cluster = _net(
        [here, A], {"h0": "localhost", "h1": "localhost", "h2": str(A), "h3": str(A)}
    )
    sites, _ = agents_where(net, cluster, 2, CLOCK)
    assert set(sites) == {"h2", "h3"}
    with pytest.raises(OSError, match=r"root@10.9.0.11's clock offset could not be measured"):
        agents_where(net, cluster, 2, {"root@10.9.0.11": {"error": "ssh: no route"}})


def test_one_machine_has_no_sites_and_keeps_its_count():
    assert agents_where(SimpleNamespace(), None, 3, None) == (None, 3)


def test_a_server_is_bound_by_address_and_a_name_resolves():
    assert server_address("10.9.0.11") == "10.9.0.11"
    assert server_address("localhost") in ("127.0.0.1", "::1")
    with pytest.raises(OSError, match="does not resolve"):
        server_address("no-such-server.invalid")


def test_the_sweep_removes_the_runs_agents_folder_on_each_server():
    script = sweep_script("kfab")
    assert f"rm -rf {agents_folder('kfab')}" in script
    assert agents_folder("kfab") == "/run/kvfabric-agents/kfab"
