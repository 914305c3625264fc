"""The local cluster's plan: names the kernel accepts and that clean can tell from a
run's, a LAN on addresses this machine does not use, servers reachable only with the
cluster's own key on their own address."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from topologies.cluster.plan import (
    ClusterPlanError,
    free_lan,
    known_hosts_text,
    owned_cluster,
    plan_local_cluster,
    server_init_script,
    server_lan_batch,
    ssh_config_text,
    sshd_config_text,
)
from topologies.naming import owned

LAN = ipaddress.ip_network("10.251.3.0/24")


def test_names_fit_the_kernel_and_are_never_a_runs():
    plan = plan_local_cluster(16, "kcz9", LAN, Path("/run/kvfabric/clusters"))
    names = [plan.bridge] + [s.netns for s in plan.servers] + [s.netns + "p" for s in plan.servers]
    assert all(len(n) <= 15 for n in names)  # IFNAMSIZ
    assert all(owned_cluster(n.removesuffix("p")) == "kcz9" for n in names)
    assert not any(owned(n) for n in names)  # a run's clean never takes them
    assert owned_cluster("kf12s3") is None and owned_cluster("kcz9-eth0") is None


def test_servers_get_consecutive_addresses_and_the_cluster_argument_names_them():
    plan = plan_local_cluster(3, "kcab", LAN, Path("/x"))
    assert plan.coordinator_address == "10.251.3.1"
    assert [s.address for s in plan.servers] == ["10.251.3.11", "10.251.3.12", "10.251.3.13"]
    assert plan.cluster_arg() == "root@10.251.3.11,root@10.251.3.12,root@10.251.3.13"
    assert len({s.hostname for s in plan.servers}) == 3


@pytest.mark.parametrize("n", [0, 17, -1])
def test_a_cluster_size_out_of_range_is_refused(n):
    with pytest.raises(ClusterPlanError, match="1 to 16 servers"):
        plan_local_cluster(n, "kcab", LAN, Path("/x"))


def test_the_lan_avoids_every_network_in_use():
    assert free_lan(["127.0.0.1/8", "10.0.2.15/24"]) == ipaddress.ip_network("10.251.0.0/24")
    taken = ["10.251.0.1/24", "10.251.1.0/24", "0.0.0.0/0", "fe80::1/64", "garbage"]
    assert free_lan(taken) == ipaddress.ip_network("10.251.2.0/24")
    with pytest.raises(ClusterPlanError, match="in use"):
        free_lan(["10.251.0.0/16"])


def test_sshd_listens_on_its_lan_address_only_and_takes_keys_only():
    plan = plan_local_cluster(2, "kcab", LAN, Path("/run/c"))
    text = sshd_config_text(plan, plan.servers[1])
    assert "ListenAddress 10.251.3.12" in text.splitlines()
    assert "PasswordAuthentication no" in text and "UsePAM no" in text
    assert f"AuthorizedKeysFile {plan.directory / 'authorized_keys'}" in text
    assert f"HostKey {plan.servers[1].host_key}" in text


def test_the_client_trusts_exactly_the_host_keys_made_for_the_cluster():
    plan = plan_local_cluster(2, "kcab", LAN, Path("/run/c"))
    known = known_hosts_text(plan, {1: "ssh-ed25519 AAAA1 a\n", 2: "ssh-ed25519 AAAA2 b"})
    assert known.splitlines() == [
        "10.251.3.11 ssh-ed25519 AAAA1 a",
        "10.251.3.12 ssh-ed25519 AAAA2 b",
    ]
    cfg = ssh_config_text(plan)
    assert "Host 10.251.3.11 10.251.3.12" in cfg and "StrictHostKeyChecking yes" in cfg
    assert f"IdentityFile {plan.client_key}" in cfg and "IdentitiesOnly yes" in cfg


def test_a_server_mounts_its_own_ovs_folders_before_starting_ovs_and_ends_as_sshd():
    plan = plan_local_cluster(1, "kcab", LAN, Path("/run/c"))
    lines = server_init_script(plan.servers[0], "/ovs-ctl", "/sshd").splitlines()
    mounts = [i for i, line in enumerate(lines) if "mount --bind" in line]
    start = next(i for i, line in enumerate(lines) if "/ovs-ctl start" in line)
    # /etc/hosts, an empty ~root/.bashrc (a fresh server's shell runs none of this
    # machine's) and 3 of Open vSwitch's folders
    assert len(mounts) == 5 and max(mounts) < start
    assert any('mount --bind /run/c/kcab/s1/bashrc "$home/.bashrc"' in line for line in lines)
    assert lines[-1].startswith("exec /sshd -D")  # sshd holds the namespaces
    assert lines[1] == "hostname kcab-s1"


def test_a_servers_lan_end_is_named_sized_and_addressed_inside_its_namespace():
    plan = plan_local_cluster(2, "kcab", ipaddress.ip_network("10.251.3.0/24"), Path("/x"))
    batch = server_lan_batch(plan.servers[1], "kcab-s2p", "eth0", 9100, 24)
    assert batch.splitlines() == [
        "link set dev kcab-s2p name eth0",
        "link set dev eth0 mtu 9100 up",
        "addr add 10.251.3.12/24 dev eth0",
        "link set dev lo up",
    ]
