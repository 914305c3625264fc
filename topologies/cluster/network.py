"""One fabric over several servers: ``FabricNetwork`` built through Mininet Cluster
Edition's classes (``topologies.cluster.nodes``), each node on the server a
``Placement`` gave it, the links between servers as VXLAN tunnels (or the edition's
ssh tap tunnels), shaped like every other link.

What holds per server, as on one machine: every name carries the run prefix; the
run's record lists the servers, so ``kvfabric clean`` sweeps each of them; ``stop``
(on exit, on Ctrl-C, after a build failing half-way) tears down every server, and a
server that cannot be reached is named in ``unreachable`` and in the log, its
leftovers left to ``clean``. Switches reach the controller over OpenFlow with TLS
(required once any server is remote): each server's Open vSwitch gets the run's
switch certificate in a folder of the run's, removed at stop.

Plain ``Mininet`` with the edition's node classes is used rather than its
``MininetCluster``, whose pre-check exits the process on a failure and which makes
``~/.ssh/mn`` in the user's home; kvfabric's own checks (``kvfabric doctor
--cluster``) and placement (``topologies.placement``) take their place.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from ..builder import BuildError, FabricNetwork
from ..fabric import Fabric
from ..hostconfig import host_address
from ..scale import Scale
from .local import local_cluster_of
from .ssh import Server
from .sweep import tls_folder

log = logging.getLogger("kvfabric.cluster")
LINKS = ("vxlan", "ssh")


class ClusterNetwork(FabricNetwork):
    """``FabricNetwork`` with each node on ``machine_of[node]`` (a server's name,
    ``str(server)``; ``localhost`` is this machine)."""

    def __init__(
        self,
        fabric: Fabric,
        scale: Scale,
        *,
        servers: Sequence[Server],
        machine_of: Mapping[str, str],
        link: str = "vxlan",
        **kwargs: Any,
    ) -> None:
        super().__init__(fabric, scale, **kwargs)
        self.servers = {str(s): s for s in servers}
        missing = [n.name for n in fabric.nodes if n.name not in machine_of]
        unknown = sorted({m for m in machine_of.values() if m not in self.servers})
        if missing or unknown:
            raise ValueError(
                f"placement: nodes without a server {missing[:5]}, "
                f"servers not in the cluster {unknown}"
            )
        if link not in LINKS:
            raise ValueError(f"link={link!r}: allowed {', '.join(LINKS)} (this kernel has no GRE)")
        self.machine_of = dict(machine_of)
        self.link = link
        self.remote = sorted({m for m in self.machine_of.values() if not self.servers[m].is_local})
        ctl = self.controller
        if self.remote and ctl is not None and (ctl.tls is None or ctl.host.startswith("127.")):
            raise ValueError(
                "switches on other servers reach the controller over TLS on a "
                "cluster address: Controller(host=<coordinator's cluster address>, "
                "tls=...)"
            )
        self.unreachable: list[str] = []

    # ----- where commands run ----------------------------------------------
    def place_of(self, node: str) -> str:
        machine = self.machine_of[node]
        return "" if self.servers[machine].is_local else machine

    def run_at(
        self, place: str, args: list[str], stdin: str | None = None, timeout: float = 20
    ) -> tuple[str, str, int]:
        if not place:
            return super().run_at(place, args, stdin, timeout)
        if place in self.failed_servers():
            return "", f"server {place} failed", 255
        proc = self.servers[place].run(args, timeout=timeout, stdin=stdin)
        return proc.stdout, proc.stderr, proc.returncode

    def host_exec(
        self,
        host: str,
        args: list[str],
        stdin: str | None = None,
    ) -> tuple[str, str, int]:
        place = self.place_of(host)
        if place and place in self.failed_servers():  # asking would wait for ssh's timeout
            return "", f"server {place} failed", 255
        return super().host_exec(host, args, stdin)

    # ----- build ---------------------------------------------------------------
    def start(self) -> None:
        for name in self.remote:
            proc = self.servers[name].run("true", timeout=15)
            if proc.returncode != 0:
                raise BuildError(
                    f"server {name} cannot be reached by ssh: "
                    f"{proc.stderr.strip() or proc.returncode} "
                    f"(fix: kvfabric doctor --cluster {name})"
                )
        super().start()

    def _create(self) -> None:
        from mininet.log import setLogLevel
        from mininet.net import Mininet
        from mininet.node import RemoteController

        from .nodes import ClusterHost, ClusterSwitch, RemoteVXLANLink

        setLogLevel("error")
        assert self.names is not None and self.record is not None and self.workdir is not None
        self.record.servers = [
            [s.dest, str(s.ssh_config) if s.ssh_config else None, local_cluster_of(s.host)]
            for s in (self.servers[m] for m in self.remote)
        ]
        self.record.save()
        digest = hashlib.sha256(self.names.prefix.encode()).digest()
        RemoteVXLANLink.vni_base = (int.from_bytes(digest[:2], "big") % 4000 + 1) << 12
        RemoteVXLANLink.mtu = self.mtu
        if self.link == "ssh":
            from mininet.examples.cluster import RemoteSSHLink as link_cls
        else:
            link_cls = RemoteVXLANLink
        switch_cls = partial(
            ClusterSwitch, datapath=self.datapath, protocols="OpenFlow13", failMode="secure"
        )
        self.net = net = Mininet(
            topo=None,
            build=False,
            controller=None,
            switch=switch_cls,
            host=ClusterHost,
            link=link_cls,
            autoSetMacs=False,
            autoStaticArp=False,
            waitConnected=False,
        )
        if self.controller is not None:
            if self.controller.tls is not None:
                self._set_ssl(self.controller.tls)
            net.addController(
                "c0",
                controller=RemoteController,
                ip=self.controller.host,
                port=self.controller.port,
                protocol="ssl" if self.controller.tls else "tcp",
            )
        for node in self.fabric.nodes:
            name = self.names.node(node)
            where = self._node_params(node.name)
            if node.is_host:
                net.addHost(name, ip=host_address(self.fabric, node.name), mac=None, **where)
            else:
                net.addSwitch(name, dpid=f"{node.dpid:016x}", **where)
        self._add_links(net)
        net.build()
        net.start()

    def _node_params(self, node: str) -> dict[str, Any]:
        server = self.servers[self.machine_of[node]]
        if server.is_local:
            return {"server": "localhost"}
        assert self.workdir is not None
        return {
            "server": server.host,
            "serverIP": server.host,
            "user": server.user,
            "ssh_base": server.ssh_options(),
            "controlPath": str(self.workdir / "ssh-%C"),
        }

    def _set_ssl(self, files: tuple[str, str, str]) -> None:
        if any(self.servers[m].is_local for m in self.machine_of.values()):
            super()._set_ssl(files)
        assert self.names is not None
        folder = tls_folder(self.names.prefix)
        for name in self.remote:
            server = self.servers[name]
            copies = []
            for path in files:
                target = f"{folder}/{path.rsplit('/', 1)[-1]}"
                text = Path(path).read_text()  # a key or certificate of the run's own PKI
                proc = server.run(f"umask 077 && mkdir -p {folder} && cat > {target}", stdin=text)
                self._check((proc.stdout, proc.stderr, proc.returncode), f"TLS files on {name}")
                copies.append(target)
            proc = server.run(["ovs-vsctl", "set-ssl", *copies])
            self._check((proc.stdout, proc.stderr, proc.returncode), f"ovs-vsctl set-ssl on {name}")

    def _record_processes(self) -> None:
        import psutil

        assert self.record is not None
        for node in self.net.hosts + self.net.switches:
            local = getattr(node, "server", "localhost") == "localhost"
            pid = node.pid if local else node.shell.pid  # a remote node: its local ssh
            try:
                self.record.processes.append((pid, psutil.Process(pid).create_time()))
            except psutil.Error:
                continue
        self.record.save()

    def _size_tx_buffer(self) -> None:
        """Each server's Open vSwitch transmit buffer (``FabricNetwork._raise_tx``):
        this machine's, and a local cluster's servers', whose ovs-vswitchd runs here; a
        real remote server's is left as it is (logged; ``unmodelled_loss`` tells)."""
        from ..ovs_tx import PIDFILE
        from .local import local_server_dir

        self.tx_buffers: dict[str, dict[str, int] | None] = {}
        if any(self.servers[m].is_local for m in self.machine_of.values()):
            self.tx_buffers["localhost"] = self._raise_tx("", PIDFILE)
        for name in self.remote:
            folder = local_server_dir(self.servers[name].host)
            if folder is None:
                log.warning(
                    "Open vSwitch's transmit buffer is not resized on %s: packets "
                    "waiting in its shaped queues may be dropped where no queue "
                    "counts them",
                    name,
                )
                self.tx_buffers[name] = None
                continue
            self.tx_buffers[name] = self._raise_tx(name, folder / "ovs-run" / "ovs-vswitchd.pid")
        found = [v for v in self.tx_buffers.values() if v]
        self.tx_buffer = min(found, key=lambda v: v["now"]) if found else None

    def _forget_dead_nodes(self) -> None:
        """Nodes whose shell has ended (their server died or became unreachable) are
        not asked anything at teardown: Mininet would wait for their answer forever
        (the shell's terminal stays open in every process started after it). Their
        server's leftovers are gone with it, or are ``clean``'s to sweep."""
        if self.net is None:
            return
        for node in self.net.hosts + self.net.switches:
            if (
                getattr(node, "isRemote", False)
                and node.shell is not None
                and node.shell.poll() is not None
            ):
                node.cmd = node.rcmd = lambda *_a, **_k: ""
                node.sendCmd = node.sendInt = lambda *_a, **_k: None
                node.waitOutput = lambda *_a, **_k: ""
                node.waiting = False

    def failed_servers(self) -> list[str]:
        """The servers some of whose nodes' shells have ended (their ssh sessions died:
        the server went down or became unreachable)."""
        if self.net is None:
            return []
        by_host = {s.host: name for name, s in self.servers.items()}
        dead = {
            by_host.get(n.server, n.server)
            for n in self.net.hosts + self.net.switches
            if getattr(n, "isRemote", False) and n.shell is not None and n.shell.poll() is not None
        }
        return sorted(dead)

    # ----- teardown ------------------------------------------------------------
    def stop(self) -> None:
        """``FabricNetwork.stop``; its sweep of the run's prefix also sweeps every other
        server (``cleanup.remove_prefix``). A server that did not answer is named in
        ``unreachable``, and the run's record stays for ``kvfabric clean``."""
        record = self.record if self.names is not None else None
        self._forget_dead_nodes()
        super().stop()
        if record is not None and record.path.exists():
            self.unreachable = [entry[0] for entry in record.servers]
