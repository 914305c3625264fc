"""A local cluster as pure data: the names, addresses and configuration texts of
N emulated "servers" on this machine (``kvfabric cluster local up N``).

Each server is a network + mount + UTS namespace with its own sshd and its own
Open vSwitch. The servers and the root namespace share a private LAN: a Linux
bridge in the root namespace (the coordinator's side, address ``.1``) and one
veth into each server (``.11``, ``.12``, ...). Nothing here touches the system;
``topologies.cluster.local`` carries a plan out.
"""

from __future__ import annotations

import ipaddress
import re
import secrets
import string
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

# ``kc`` + two characters: never a run prefix (``kf..``), so a run's clean and the
# cluster's never take each other's names.
CLUSTER_PREFIX_RE = r"kc[0-9a-z]{2}"
OWNED_CLUSTER_NAME = re.compile(rf"^(?P<prefix>{CLUSTER_PREFIX_RE})-(lan|s\d+)$")
MAX_SERVERS = 16
LAN_POOL = ipaddress.ip_network("10.251.0.0/16")
FIRST_SERVER_HOST = 11
# The LAN carries VXLAN: 50 bytes of outer headers over a 1500-byte fabric frame
# (and 9000 for jumbo runs) must fit without fragmenting.
LAN_MTU = 9100
INSIDE_IFNAME = "lan0"
_ALPHABET = string.digits + string.ascii_lowercase


class ClusterPlanError(ValueError):
    """A local cluster that cannot be planned (e.g. too many servers)."""


@dataclass(frozen=True)
class LocalServer:
    """One emulated server of a local cluster."""

    index: int  # 1-based
    netns: str  # also the root-side name of its veth
    address: str  # on the cluster LAN
    hostname: str
    directory: Path  # its host key, sshd config, OVS run/etc/log folders

    @property
    def ovs_dirs(self) -> dict[str, Path]:
        """Private folder bind-mounted over each of Open vSwitch's system folders."""
        return {
            "/var/run/openvswitch": self.directory / "ovs-run",
            "/etc/openvswitch": self.directory / "ovs-etc",
            "/var/log/openvswitch": self.directory / "ovs-log",
        }

    @property
    def host_key(self) -> Path:
        return self.directory / "ssh_host_ed25519_key"

    @property
    def sshd_config(self) -> Path:
        return self.directory / "sshd_config"


@dataclass(frozen=True)
class LocalClusterPlan:
    prefix: str
    lan: ipaddress.IPv4Network
    directory: Path
    servers: tuple[LocalServer, ...]

    @property
    def bridge(self) -> str:
        return f"{self.prefix}-lan"

    @property
    def coordinator_address(self) -> str:
        return str(self.lan.network_address + 1)

    @property
    def client_key(self) -> Path:
        return self.directory / "id_ed25519"

    @property
    def ssh_config(self) -> Path:
        return self.directory / "ssh_config"

    @property
    def known_hosts(self) -> Path:
        return self.directory / "known_hosts"

    @property
    def record(self) -> Path:
        return self.directory / "cluster.json"

    def cluster_arg(self, user: str = "root") -> str:
        """What ``--cluster`` takes to run on these servers."""
        return ",".join(f"{user}@{s.address}" for s in self.servers)


def new_cluster_prefix(taken: Iterable[str] = ()) -> str:
    taken = set(taken)
    while True:
        prefix = "kc" + "".join(secrets.choice(_ALPHABET) for _ in range(2))
        if prefix not in taken:
            return prefix


def owned_cluster(name: str) -> str | None:
    """The cluster prefix if ``name`` is a local cluster's bridge, veth or netns."""
    m = OWNED_CLUSTER_NAME.match(name)
    return m.group("prefix") if m else None


def free_lan(in_use: Iterable[str]) -> ipaddress.IPv4Network:
    """The first /24 of ``LAN_POOL`` overlapping none of ``in_use`` (CIDRs of this
    machine's addresses and routes)."""
    used = []
    for text in in_use:
        try:
            used.append(ipaddress.ip_network(text, strict=False))
        except ValueError:
            continue
    for net in LAN_POOL.subnets(new_prefix=24):
        if not any(net.overlaps(u) for u in used if u.version == 4 and u.prefixlen > 0):
            return net
    raise ClusterPlanError(f"every /24 of {LAN_POOL} is in use on this machine")


def plan_local_cluster(
    n: int, prefix: str, lan: ipaddress.IPv4Network, root: Path
) -> LocalClusterPlan:
    """The plan of ``n`` servers under ``root / prefix``."""
    if not 1 <= n <= MAX_SERVERS:
        raise ClusterPlanError(f"a local cluster has 1 to {MAX_SERVERS} servers, not {n}")
    if not re.fullmatch(CLUSTER_PREFIX_RE, prefix):
        raise ClusterPlanError(f"cluster prefix {prefix!r} must match {CLUSTER_PREFIX_RE}")
    directory = root / prefix
    servers = tuple(
        LocalServer(
            index=i,
            netns=f"{prefix}-s{i}",
            address=str(lan.network_address + FIRST_SERVER_HOST + i - 1),
            hostname=f"{prefix}-s{i}",
            directory=directory / f"s{i}",
        )
        for i in range(1, n + 1)
    )
    return LocalClusterPlan(prefix, lan, directory, servers)


def sshd_config_text(plan: LocalClusterPlan, server: LocalServer) -> str:
    """sshd for one server: its own host key, key-only root login, the cluster's
    client key alone, listening on its LAN address only; tunnels allowed (Mininet
    Cluster Edition's ``link: ssh``)."""
    return "\n".join(
        [
            f"ListenAddress {server.address}",
            "Port 22",
            f"HostKey {server.host_key}",
            f"PidFile {server.directory / 'sshd.pid'}",
            f"AuthorizedKeysFile {plan.directory / 'authorized_keys'}",
            "PermitRootLogin prohibit-password",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "PermitTunnel yes",
            "AllowTcpForwarding yes",
            "MaxSessions 200",
            "MaxStartups 100:30:200",
            "Subsystem sftp internal-sftp",
            "",
        ]
    )


def ssh_config_text(plan: LocalClusterPlan) -> str:
    """The client side (``ssh -F``): the cluster's key and known hosts only."""
    hosts = " ".join(s.address for s in plan.servers)
    return "\n".join(
        [
            f"Host {hosts}",
            f"  IdentityFile {plan.client_key}",
            "  IdentitiesOnly yes",
            f"  UserKnownHostsFile {plan.known_hosts}",
            "  StrictHostKeyChecking yes",
            "  BatchMode yes",
            "  ConnectTimeout 5",
            "",
        ]
    )


def known_hosts_text(plan: LocalClusterPlan, public_keys: dict[int, str]) -> str:
    """One line per server: its address and the public host key made for it."""
    return "".join(f"{s.address} {public_keys[s.index].strip()}\n" for s in plan.servers)


def server_init_script(server: LocalServer, ovs_ctl: str, sshd: str) -> str:
    """What runs inside a server's new mount + UTS namespace: its hostname (and an
    ``/etc/hosts`` naming it), an empty ``~root/.bashrc``, private Open vSwitch folders,
    its Open vSwitch, then sshd in the foreground (the process that holds the namespaces).

    A fresh server's shell would not run this machine's ``.bashrc`` (here: pyenv's init,
    which rehashes under a lock file; a ``power_off`` that killed a session mid-rehash
    left the lock, and every later ssh session into any server waited 60 s on it)."""
    hosts = server.directory / "hosts"  # its own name resolves (sudo asks for it)
    rc = server.directory / "bashrc"
    lines = [
        "set -e",
        f"hostname {server.hostname}",
        f"cp /etc/hosts {hosts} && echo '127.0.1.1 {server.hostname}' >> {hosts}",
        f"mount --bind {hosts} /etc/hosts",
        'home="$(getent passwd root | cut -d: -f6)"',
        f'if [ -f "$home/.bashrc" ]; then : > {rc} && mount --bind {rc} "$home/.bashrc"; fi',
    ]
    for target, source in server.ovs_dirs.items():
        lines.append(f"mkdir -p {target} && mount --bind {source} {target}")
    lines += [
        f"MONITOR=no {ovs_ctl} start --system-id=random --no-mlockall"
        f" >{server.directory}/ovs-start.log 2>&1",
        f"exec {sshd} -D -e -f {server.sshd_config} 2>>{server.directory}/sshd.log",
    ]
    return "\n".join(lines) + "\n"


def server_lan_batch(server: LocalServer, peer: str, ifname: str, mtu: int, prefixlen: int) -> str:
    """``ip -batch`` lines, run inside the server's network namespace, that give its
    end of the LAN veth (``peer``, just moved in) its name, MTU and address, and
    bring up its loopback."""
    return (
        f"link set dev {peer} name {ifname}\n"
        f"link set dev {ifname} mtu {mtu} up\n"
        f"addr add {server.address}/{prefixlen} dev {ifname}\n"
        "link set dev lo up\n"
    )
