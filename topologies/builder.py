"""The Mininet builder: a ``Fabric`` and a ``Scale`` become a running
network of OVS switches and host namespaces, shaped on every egress.

``FabricNetwork`` is a context manager. Its exit releases every namespace,
veth, bridge, process and file it created, also on Ctrl-C and when the build
fails half-way; a second Ctrl-C during teardown is held until teardown ends.
This is the only module of ``topologies`` that imports Mininet.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import subprocess
import tempfile
import threading
from collections import defaultdict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from .cleanup import RunRecord, remove_prefix, taken_prefixes
from .fabric import Fabric, port_mac
from .hostconfig import host_address, ip_commands
from .machine import ovs_kernel_datapath, preflight
from .naming import RunNames, new_prefix
from .ovs_tx import PIDFILE, TxBuffer, needed_bytes, packet_truesize
from .processes import run
from .qos import ClassPlan
from .scale import DEFAULT_MTU, Scale
from .shaping import (
    Egress,
    batch_text,
    egress_plan,
    frame_bytes,
    htb_commands,
)
from .transport import TransportSettings, host_sysctls, route_commands, route_options
from .wakeup import WakeupLatency

log = logging.getLogger("kvfabric.builder")

HOST_OFFLOADS = ["tx", "off", "sg", "off", "tso", "off", "gso", "off", "gro", "off"]
SWITCH_OFFLOADS = ["gso", "off", "gro", "off", "tso", "off"]
HOST_SYSCTLS = [
    "net.ipv6.conf.all.disable_ipv6=1",
    "net.ipv6.conf.default.disable_ipv6=1",
    "net.ipv4.conf.all.rp_filter=0",
    "net.ipv4.conf.default.rp_filter=0",
]


class BuildError(RuntimeError):
    """A step of the build failed; the message carries the command's output."""


@dataclass(frozen=True)
class Controller:
    """A remote OpenFlow controller the switches connect to."""

    host: str = "127.0.0.1"
    port: int = 6653
    # OpenFlow over TLS: the switches' private key, their certificate and the CA's
    # (a run's PKI, ``controller.tls``); Open vSwitch's one SSL setting holds them
    tls: tuple[str, str, str] | None = None


class RuleInstaller(Protocol):
    """Installs a fabric's rules without a controller, once its switches exist
    (``controller.ofctl.StaticRules``): the builder is handed routing, it does
    not compute it."""

    def install(self, net: FabricNetwork) -> None: ...


class FabricNetwork:
    """A running emulation of ``fabric`` at ``scale`` (a ``topologies.scale.Scale``: its
    bandwidth scale and MTU).

    ``datapath`` is ``auto`` (kernel if the openvswitch module is loaded,
    else userspace), ``kernel`` or ``user``. The switches get their rules from
    exactly one of ``controller`` (they connect to it) or ``rules`` (installed
    when the network is up). ``qos`` adds the class queues under every switch
    egress. ``scale.mtu`` above 1500 turns jumbo frames on for every interface (hosts
    and switch ports); link buffers keep their bytes (``topologies.shaping.queue_frames``).
    ``plan``: the egress plan of ``fabric`` at ``scale`` when the caller has it
    (``egress_plan``, computed once per run), else it is computed here.
    ``transport``: TCP's minimum RTO (real-equivalent, stretched by the time dilation)
    and delayed ACKs on every host route (``topologies.transport``; None: the kernel's).
    """

    def __init__(
        self,
        fabric: Fabric,
        scale: Scale,
        *,
        datapath: str = "auto",
        controller: Controller | None = None,
        rules: RuleInstaller | None = None,
        qos: ClassPlan | None = None,
        plan: list[Egress] | None = None,
        transport: TransportSettings | None = None,
    ) -> None:
        if not isinstance(scale, Scale):
            raise TypeError(f"FabricNetwork: scale={scale!r} must be a topologies.scale.Scale")
        self.fabric = fabric
        self.scale = scale
        if datapath not in ("auto", "kernel", "user"):
            raise ValueError(f"datapath={datapath!r}: allowed auto, kernel, user")
        self.datapath = datapath
        if (controller is None) == (rules is None):
            raise ValueError(
                "FabricNetwork needs exactly one of controller= (switches connect "
                "to it) or rules= (e.g. controller.ofctl.StaticRules())"
            )
        self.controller = controller
        self.rules = rules
        self.qos = qos
        # errors first
        self.plan: list[Egress] = egress_plan(fabric, scale) if plan is None else list(plan)
        route_options(transport, scale)  # refuses a minimum RTO the kernel cannot honour
        self.transport = transport
        self.names: RunNames | None = None
        self.net: Any = None
        self.record: RunRecord | None = None
        self.workdir: Path | None = None
        self._tx = TxBuffer()
        self.wakeup = WakeupLatency(0)  # held from start to stop (topologies.wakeup)
        self._ssl_set = False  # Open vSwitch's SSL setting is this run's (``_set_ssl``)
        # the userspace datapath's transmit buffer: {"before", "now"} bytes (None: unchanged)
        self.tx_buffer: dict[str, int] | None = None

    @property
    def mtu(self) -> int:
        return self.scale.mtu

    # ----- lifetime ------------------------------------------------------
    def __enter__(self) -> FabricNetwork:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        preflight()
        dp = self.datapath
        if dp == "auto":
            dp = "kernel" if ovs_kernel_datapath() else "user"
        self.datapath = dp
        self.names = RunNames(new_prefix(taken_prefixes()))
        self.record = RunRecord.mine(self.names.prefix)
        self.workdir = Path(tempfile.mkdtemp(prefix=f"kvfabric-{self.names.prefix}-"))
        self.record.paths.append(str(self.workdir))
        self.record.save()
        self.wakeup.hold()
        self._create()
        self._record_processes()
        self._configure_hosts()
        self._shape()
        if dp == "user":
            self._size_tx_buffer()
        if self.rules is not None:
            self.rules.install(self)
        log.info("fabric %s up as %s (%s datapath)", self.fabric.kind, self.names.prefix, dp)

    def stop(self) -> None:
        """Release everything; safe to call twice and after a failed start."""
        if self.names is None:
            return
        with _signals_held():
            self._tx.restore()
            self.wakeup.release()
            if self.net is not None:
                try:
                    self.net.stop()
                except Exception as exc:  # fall through to the scoped sweep
                    log.warning("Mininet stop failed (%s); sweeping by prefix", exc)
                for node in self.net.controllers:  # RemoteController.stop leaves its shell
                    with contextlib.suppress(Exception):
                        node.terminate()
                self.net = None
            if self._ssl_set:
                run(["ovs-vsctl", "del-ssl"])
                self._ssl_set = False
            leftovers = remove_prefix(self.names.prefix, self.record)
            if leftovers:
                log.info("swept after stop: %s", ", ".join(leftovers))
        self.names = None

    # ----- build steps ---------------------------------------------------
    def _create(self) -> None:
        from mininet.link import Link as MnLink
        from mininet.log import setLogLevel
        from mininet.net import Mininet

        from .shell_output import FabricController, FabricHost, FabricSwitch

        setLogLevel("error")
        switch_cls = partial(
            FabricSwitch,
            datapath=self.datapath,
            protocols="OpenFlow13",
            failMode="secure",
            batch=True,
        )
        self.net = net = Mininet(
            topo=None,
            build=False,
            controller=None,
            switch=switch_cls,
            host=FabricHost,
            link=MnLink,
            autoSetMacs=False,
            autoStaticArp=False,
            waitConnected=False,
        )
        if self.controller is not None:
            if self.controller.tls is not None:
                self._set_ssl(self.controller.tls)
            net.addController(
                "c0",
                controller=FabricController,
                ip=self.controller.host,
                port=self.controller.port,
                protocol="ssl" if self.controller.tls else "tcp",
            )
        assert self.names is not None
        for node in self.fabric.nodes:
            name = self.names.node(node)
            if node.is_host:
                net.addHost(name, ip=host_address(self.fabric, node.name), mac=None)
            else:
                net.addSwitch(name, dpid=f"{node.dpid:016x}")
        self._add_links(net)
        net.build()
        net.start()

    def _add_links(self, net: Any) -> None:
        """Every fabric link, its ports numbered as the fabric numbers them and the
        hosts' ends given their fabric MAC addresses."""
        assert self.names is not None
        for link in self.fabric.links:
            a, b = self.fabric.node(link.a), self.fabric.node(link.b)
            params: dict[str, Any] = {}
            if a.is_host:
                params["addr1"] = port_mac(a.number, link.a_port)
            if b.is_host:
                params["addr2"] = port_mac(b.number, link.b_port)
            net.addLink(
                self.names.node(a),
                self.names.node(b),
                port1=link.a_port,
                port2=link.b_port,
                **params,
            )

    def _set_ssl(self, files: tuple[str, str, str]) -> None:
        """Point Open vSwitch's SSL setting at the run's switch key and certificates
        (removed in ``stop``; ``kvfabric clean`` removes one whose files are gone)."""
        proc = run(["ovs-vsctl", "set-ssl", *files])
        self._check((proc.stdout, proc.stderr, proc.returncode), "ovs-vsctl set-ssl")
        self._ssl_set = True

    def _record_processes(self) -> None:
        import psutil

        assert self.record is not None
        for node in self.net.hosts + self.net.switches:
            try:
                self.record.processes.append((node.pid, psutil.Process(node.pid).create_time()))
            except psutil.Error:
                continue
        self.record.save()

    def _configure_hosts(self) -> None:
        for host in self.fabric.hosts:
            mn = self.mn(host.name)
            for port in sorted(p for p in self._ports(host.name)):
                self._check(
                    mn.pexec("ethtool", "-K", self.intf(host.name, port), *HOST_OFFLOADS),
                    f"ethtool on {host.name}",
                )
            sysctls = [*HOST_SYSCTLS, *host_sysctls(self.transport)]
            self._check(mn.pexec("sysctl", "-q", "-w", *sysctls), f"sysctl on {host.name}")
            cmds = ip_commands(self.fabric, host.name, self.intf)
            cmds += route_commands(self.fabric, host.name, self.intf, self.transport, self.scale)
            if self.mtu != DEFAULT_MTU:
                cmds = [
                    ["link", "set", "dev", self.intf(host.name, port), "mtu", str(self.mtu)]
                    for port in sorted(self._ports(host.name))
                ] + cmds
            self._check(
                self.host_exec(host.name, ["ip", "-batch", "-"], batch_text(cmds)),
                f"static ARP/routes/TCP timers on {host.name}",
            )
        for place, switches in self.by_place(sw.name for sw in self.fabric.switches).items():
            # Best effort: some offloads are fixed on veth; the qdisc sees MTU packets anyway.
            line = "; ".join(
                f"ethtool -K {self.intf(sw, port)} {' '.join(SWITCH_OFFLOADS)}"
                for sw in switches
                for port in self._ports(sw)
            )
            self.run_at(place, ["sh", "-c", f"{line} 2>/dev/null; true"], timeout=120)
        if self.mtu != DEFAULT_MTU:
            self._switch_mtu()

    def _switch_mtu(self) -> None:
        """Jumbo frames on every switch port: the kernel's MTU, and Open vSwitch's
        ``mtu_request`` so that the datapath receives whole frames."""
        for place, switches in self.by_place(sw.name for sw in self.fabric.switches).items():
            ports = [self.intf(sw, p) for sw in switches for p in self._ports(sw)]
            text = batch_text([["link", "set", "dev", d, "mtu", str(self.mtu)] for d in ports])
            self._check(self.run_at(place, ["ip", "-batch", "-"], text), "MTU on switch ports")
            args = ["ovs-vsctl"]
            for dev in ports:
                args += ["--", "set", "interface", dev, f"mtu_request={self.mtu}"]
            self._check(self.run_at(place, args, timeout=120), "mtu_request on switch ports")

    def _shape(self) -> None:
        by_ns: dict[tuple[str, str], list[list[str]]] = defaultdict(list)
        for eg in self.plan:
            is_host = self.fabric.node(eg.node).is_host
            ns = (eg.node, "") if is_host else ("", self.place_of(eg.node))
            dev = self.intf(eg.node, eg.port)
            if self.qos is not None and not is_host:
                # Switch egresses get one HTB class per traffic class; the leaf
                # (trust boundary) marks DSCP, hosts keep a single queue.
                by_ns[ns] += self.qos.commands(dev, eg.rate_bps, eg.buffer_pkts, self.mtu)
            else:
                by_ns[ns] += htb_commands(dev, eg.rate_bps, eg.buffer_pkts, self.mtu)
        for (host, place), cmds in by_ns.items():
            text = batch_text(cmds)
            if host:
                self._check(self.host_exec(host, ["tc", "-batch", "-"], text), f"tc on {host}")
            else:
                self._check(
                    self.run_at(place, ["tc", "-batch", "-"], text, timeout=120),
                    f"tc on switch ports{f' of {place}' if place else ''}",
                )

    def _size_tx_buffer(self) -> None:
        """Room in OVS's one transmit socket for every shaped switch queue full at once
        (``topologies.ovs_tx``: else OVS drops what no queue counts)."""
        self.tx_buffer = self._raise_tx("", PIDFILE)

    def _raise_tx(self, place: str, pidfile: Path) -> dict[str, int] | None:
        """Raise the transmit buffer of the ovs-vswitchd at ``pidfile``, which runs the
        switches of ``place``. The socket exists once OVS has sent a packet: if it has
        not yet, one frame of the local experimental ethertype goes out of a switch port
        first (its host ignores it)."""
        classes = len(self.qos.classes) if self.qos is not None else 1
        limits = [
            eg.queue_pkts * classes for eg in self.plan if not self.fabric.node(eg.node).is_host
        ]
        size = needed_bytes(limits, packet_truesize(frame_bytes(self.mtu)))
        got = self._tx.raise_to(size, pidfile)
        switches = [sw for sw in self.fabric.switches if self.place_of(sw.name) == place]
        if got is None and switches:
            sw = switches[0]
            port = self.fabric.links_of(sw.name)[0].port_of(sw.name)
            frame = "02000000000102000000000288b5" + "00" * 46
            out = f"in_port=controller packet={frame} actions=output:{port}"
            self.run_at(
                place, ["ovs-ofctl", "-O", "OpenFlow13", "packet-out", self.bridge(sw.name), out]
            )
            got = self._tx.raise_to(size, pidfile)
        if got is None:
            log.warning(
                "Open vSwitch's transmit buffer is unchanged%s: packets waiting in "
                "shaped queues may be dropped where no queue counts them",
                f" on {place}" if place else "",
            )
        return got

    # ----- run-time operations --------------------------------------------
    def set_link(self, a: str, b: str, up: bool) -> None:
        """Take the link between fabric nodes ``a`` and ``b`` down (both ends) or up."""
        link = self.fabric.link_between(a, b)
        state = "up" if up else "down"
        for node, port in ((link.a, link.a_port), (link.b, link.b_port)):
            args = ["ip", "link", "set", "dev", self.intf(node, port), state]
            if self.fabric.node(node).is_host:
                self._check(self.host_exec(node, args), f"link {state} on {node}")
                if up:
                    self._retime_routes(node, self.intf(node, port))
            else:
                self._check(self.run_at(self.place_of(node), args), f"link {state} on {node}")

    def _retime_routes(self, host: str, dev: str) -> None:
        """The transport options again on ``host``'s routes over ``dev``: a link down
        removes its routes, and the one its address makes comes back without them."""
        cmds = [
            c
            for c in route_commands(self.fabric, host, self.intf, self.transport, self.scale)
            if c[c.index("dev") + 1] == dev
        ]
        if cmds:
            self._check(
                self.host_exec(host, ["ip", "-batch", "-"], batch_text(cmds)),
                f"TCP timers on {host}'s routes over {dev}",
            )

    def set_rate(self, a: str, b: str, gbps: float) -> None:
        """Shape both egresses of the link between ``a`` and ``b`` to ``gbps``
        (real-equivalent), as a port that trained down to a lower speed: only the HTB
        classes change (``tc class replace``), so the queues and what they hold stay."""
        link = self.fabric.link_between(a, b)
        rate = self.scale.link_bps(gbps)
        for eg in self.plan:
            if eg.link != link:
                continue
            dev = self.intf(eg.node, eg.port)
            is_host = self.fabric.node(eg.node).is_host
            if self.qos is not None and not is_host:
                cmds = self.qos.commands(dev, rate, eg.buffer_pkts, self.mtu)
            else:
                cmds = htb_commands(dev, rate, eg.buffer_pkts, self.mtu)
            classes = [c for c in cmds if c[0] == "class"]
            what = f"rate {gbps:g} Gbit/s on {eg.node}"
            for args in classes:
                if is_host:
                    self._check(self.host_exec(eg.node, ["tc", *args]), what)
                else:
                    self._check(self.run_at(self.place_of(eg.node), ["tc", *args]), what)

    # ----- where commands run ------------------------------------------------
    # One machine here: every switch-side command runs in this root namespace. A
    # cluster (``topologies.cluster.network``) places each switch on a server.
    def place_of(self, node: str) -> str:
        """Where fabric node ``node``'s switch-side commands run ("" = this machine)."""
        return ""

    def failed_servers(self) -> list[str]:
        """The servers that failed mid-run (``ClusterNetwork``'s); one machine has none."""
        return []

    def by_place(self, nodes: Iterable[str]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = defaultdict(list)
        for name in nodes:
            out[self.place_of(name)].append(name)
        return dict(out)

    def run_at(
        self, place: str, args: list[str], stdin: str | None = None, timeout: float = 20
    ) -> tuple[str, str, int]:
        """Run ``args`` at ``place`` (``place_of``); ``stdin`` is its input."""
        proc = run(args, timeout=timeout, input=stdin)
        return proc.stdout, proc.stderr, proc.returncode

    def host_exec(
        self,
        host: str,
        args: list[str],
        stdin: str | None = None,
    ) -> tuple[str, str, int]:
        """Run ``args`` in host ``host``'s namespace (on its server), ``stdin`` its input."""
        proc = self.mn(host).popen(
            *args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        out, err = proc.communicate(stdin.encode() if stdin is not None else None, timeout=60)
        return out.decode(errors="replace"), err.decode(errors="replace"), proc.returncode

    def interact(self) -> None:
        """Mininet's own command line on this network (``kvfabric cli``), until it exits."""
        from mininet.cli import CLI
        from mininet.log import setLogLevel

        assert self.net is not None
        setLogLevel("output")  # the builder keeps Mininet quiet; its CLI must talk
        CLI(self.net)

    # ----- names -----------------------------------------------------------
    def mn(self, name: str) -> Any:
        """The Mininet node of fabric node ``name``."""
        assert self.names is not None and self.net is not None
        return self.net.get(self.names.node(self.fabric.node(name)))

    def netns(self, host: str) -> str:
        """The path of a host's network namespace (its Mininet shell's)."""
        return f"/proc/{self.mn(host).pid}/ns/net"

    def bridge(self, switch: str) -> str:
        assert self.names is not None
        return self.names.node(self.fabric.node(switch))

    def intf(self, node: str, port: int) -> str:
        assert self.names is not None
        return self.names.intf(self.fabric.node(node), port)

    @property
    def prefix(self) -> str | None:
        return self.names.prefix if self.names else None

    # ----- helpers -----------------------------------------------------------
    def _ports(self, node: str) -> list[int]:
        return [lk.port_of(node) for lk in self.fabric.links_of(node)]

    def workfile(self, name: str, text: str) -> Path:
        """Write ``text`` to ``name`` in this network's work directory (removed at stop)."""
        assert self.workdir is not None
        path = self.workdir / name
        path.write_text(text)
        return path

    @staticmethod
    def _check(result: tuple[str, str, int], what: str) -> None:
        out, err, code = result
        if code != 0:
            raise BuildError(f"{what} failed (exit {code}): {(err or out).strip()[:500]}")


@contextmanager
def _signals_held() -> Iterator[None]:
    """Hold SIGINT/SIGTERM while tearing down; each is delivered once afterwards.

    Python's handlers run in the main thread whichever thread the kernel delivered the
    signal to, so blocking it in this thread's mask (``pthread_sigmask``) is not enough
    once the run has other threads (samplers, live-saving, the watch): the signal goes to
    one of them and the handler interrupts the teardown anyway (measured: 3 of 3). So
    the handlers themselves are swapped for one that only notes the signal. Off the main
    thread no handler runs here, so nothing needs holding."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []

    def note(signum: int, _frame: object) -> None:
        if signum not in pending:
            pending.append(signum)

    old = {s: signal.signal(s, note) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        for s in pending:
            signal.raise_signal(s)
