"""The agent fleet: the agents of every host a schedule names, in a bounded number
of worker processes, and the coordinator that starts them together and resolves
the schedule's dependencies live.

    with AgentFleet(net, run_dir, schedule, Scale()) as fleet:
        flows = fleet.run(timeout_s=30)

``AgentFleet`` groups the hosts (a GPU server's hosts stay together) into at most
``processes`` workers (default: one per CPU), starts them (``launcher``), hands
each the rows its hosts send (bytes already scaled: ``wire.scale_bytes``) and
opens the persistent connections; ``run`` starts every worker at one absolute t0
and follows their events (``coordinator``); the records are then collected and
merged into one row per schedule row (``merge.FLOW_COLUMNS``). Every worker is
stopped on exit (stop, terminate, kill), also on Ctrl-C. Nothing is printed;
logging goes to ``kvfabric.fleet`` and each worker's log to
``<run_dir>/agents/worker-<i>.log``.

Memory follows the flows in flight, not the run's length: each worker spills its
finished records to ``<run_dir>/agents/worker-<i>.spill.jsonl`` every ``spill_s``
(``spill``) and merges them back at collect; and when a caller saves the settled
flows as the run goes (``experiments.orchestration.live.LiveTables`` sets
``saved_flows``), the coordinator forgets each flow once saved and the final table
reads those rows back, laying the workers' records over them (``merge.with_records``).
Either way the table is the same. What stays: the planned schedule (allocated at
start), a completion group's members (its fate depends on them) and failures.

``net`` needs ``fabric`` (hosts with ``name``, ``ip``, ``server``) and
optionally ``netns(host)``, the path of a host's network namespace
(``topologies.builder.FabricNetwork`` has both; without ``netns`` every host's
sockets are made in the caller's namespace, as on loopback).

``sites`` (host name -> ``sites.WorkerSite``) runs the workers of those hosts where
the site says (another machine: through ssh), controlled over the authenticated TCP
channel; a worker serves the hosts of one site only, and each site gets up to
``processes`` workers. Such a worker reads no file of this machine: its hosts come on
its stdin, its rows in ``load`` parts and its records in the ``collect`` reply (kept
in the agents folder as ``worker-<i>.records.json`` all the same), and it keeps the
coordinator's clock by the site's offset (``timebase``). Hosts without a site, and
every host without ``sites``, are served from this machine as above.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from topologies.scale import Scale

from ..driver import Driver, dilated
from ..wire import CONNECTIONS
from ..workloads.deps import DependencyTracker
from ..workloads.schedule import validate_schedule
from .coordinator import Coordinator
from .launcher import FleetError, Workers, assign_hosts
from .merge import agent_rows, flows_table, live_frame, plan, tenant_codes, with_records
from .pauses import no_full_collections
from .records import Received, Sent, read_records, records_of
from .sites import WorkerSite
from .spill import SPILL_S
from .worker import LOAD_PART, PRIORITIES, thread_priority

log = logging.getLogger("kvfabric.fleet")

PER_HOST = "per_host"
# Threads of this process (the samplers) take the GIL from the coordinator for at most
# this long, not Python's default 5 ms: the coordinator's next decision waits on it.
SWITCH_INTERVAL_S = 0.0005


def in_run_order(flows: pd.DataFrame, planned: pd.DataFrame) -> pd.DataFrame:
    """``flows`` in the order of the run: the planned rows as planned, then the live
    driver's in flow id order (the order a driver hands them out)."""
    position = pd.Series(range(len(planned)), index=planned["flow_id"].to_numpy())
    key = flows["flow_id"].map(position).fillna(len(planned) + flows["flow_id"])
    return flows.iloc[key.to_numpy().argsort(kind="stable")].reset_index(drop=True)


def available_cc() -> list[str]:
    try:
        return Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()
    except OSError:
        return []


def process_count(processes: int | str | None, hosts: int) -> int:
    """Workers for ``hosts`` hosts: ``None``/"auto" one per CPU, ``per_host`` one per
    host (the design before workers served many hosts), or a number."""
    if processes in (None, "auto"):
        return max(1, min(os.cpu_count() or 1, hosts))
    if processes == PER_HOST:
        return max(1, hosts)
    if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
        raise ValueError(f"processes={processes!r}; allowed: auto, {PER_HOST}, or an integer >= 1")
    return min(processes, max(1, hosts))


class AgentFleet:
    """The agents of ``schedule``'s hosts; see the module docstring.

    - ``net``: a running ``topologies.builder.FabricNetwork``.
    - ``run_dir``: where control sockets, schedules, records and agent logs go.
    - ``schedule``: a schedule (``traffic.workloads``), real-equivalent bytes.
    - ``scale``: the run's ``topologies.scale.Scale``; it converts the real bytes of
      rows with ``scaled`` true to the bytes sent (``wire.scale_bytes``).
    - ``cc``: TCP congestion control set on every socket (default cubic).
    - ``connection``: ``persistent`` or ``per_flow``.
    - ``processes``: worker processes (``process_count``).
    - ``priority``: the workers' CPU priority: ``rt`` (default: SCHED_FIFO 1, so a
      timer wake-up preempts ordinary processes; workers never spin, and the
      kernel's RT throttling keeps 5% for others), ``nice`` (-10) or ``normal``.
    - ``driver``: a live workload (``traffic.driver``) run alongside the schedule:
      its messages are handed to the agents as the run goes, it hears of each of
      them received or failed, and the run is settled only once it is finished.
    - ``timer_lead_ms``: the driver's timers are run this long before they are due,
      so the messages they produce reach the agents before their send instants. A
      driver deciding at a timer thus sees the run as it was up to this long
      before the timer's instant: never the future, at worst slightly stale.
    - ``ready_timeout_s``, ``start_delay_s`` (t0 = now + this), ``udp_grace_s``
      (a datagram not received this long after it was sent is lost),
      ``stop_grace_s`` (terminate, then kill).
    - ``spill_s``: each worker moves its finished records to a file in the agents
      folder this often (``spill``), so its memory does not grow with the run; ``None``
      keeps them in memory until they are collected. The flows table is the same.
    - ``sites``: host name -> where its worker runs (see the module docstring).
    """

    def __init__(
        self,
        net: Any,
        run_dir: str | os.PathLike,
        schedule: pd.DataFrame,
        scale: Scale,
        cc: str = "cubic",
        connection: str = "persistent",
        *,
        processes: int | str | None = None,
        ready_timeout_s: float = 20.0,
        start_delay_s: float = 0.3,
        udp_grace_s: float = 0.5,
        stop_grace_s: float = 3.0,
        priority: str = "rt",
        driver: Driver | None = None,
        timer_lead_ms: float = 5.0,
        spill_s: float | None = SPILL_S,
        sites: Mapping[str, WorkerSite] | None = None,
    ) -> None:
        if connection not in CONNECTIONS:
            raise ValueError(f"connection={connection!r}; allowed: {', '.join(CONNECTIONS)}")
        if priority not in PRIORITIES:
            raise ValueError(f"priority={priority!r}; allowed: {', '.join(PRIORITIES)}")
        known = available_cc()
        if known and cc not in known:
            raise ValueError(f"cc={cc!r} is not available here; allowed: {', '.join(known)}")
        validate_schedule(schedule)
        self.net, self.cc, self.connection = net, cc, connection
        self.run_dir = Path(run_dir)
        self.driver = driver
        self.timer_lead_ns = int(timer_lead_ms * 1e6)
        self.tenants = tenant_codes(schedule, driver.tenants if driver else None)
        self.planned = plan(schedule, scale, self.tenants)
        self.scale = scale
        fabric_hosts = list(net.fabric.hosts)
        named = set(self.planned["src"]) | set(self.planned["dst"])
        named |= set(driver.hosts if driver else [])
        unknown = sorted(named - {h.name for h in fabric_hosts})
        if unknown:
            raise ValueError(f"schedule names hosts the fabric lacks: {unknown}")
        self.hosts = [h.name for h in fabric_hosts if h.name in named]
        self.ips = {h: net.fabric.node(h).ip for h in self.hosts}
        process_count(processes, len(named))  # refuses a bad count before anything
        sites = dict(sites or {})
        strangers = sorted(set(sites) - {h.name for h in fabric_hosts})
        if strangers:
            raise ValueError(f"sites name hosts the fabric lacks: {strangers}")
        at_site: dict[WorkerSite | None, dict[Any, list[str]]] = {}
        for h in fabric_hosts:
            if h.name in named:
                server = getattr(h, "server", None)
                servers = at_site.setdefault(sites.get(h.name), {})
                servers.setdefault(h.name if server is None else server, []).append(h.name)
        self.groups: list[list[str]] = []
        self.group_sites: list[WorkerSite | None] = []  # where each group's worker runs
        for site, servers in at_site.items():
            count = process_count(processes, sum(map(len, servers.values())))
            for group in assign_hosts(list(servers.values()), count):
                self.groups.append(group)
                self.group_sites.append(site)
        self.ready_timeout_s, self.start_delay_s = ready_timeout_s, start_delay_s
        self.udp_grace_s, self.stop_grace_s = udp_grace_s, stop_grace_s
        self.priority = priority
        if spill_s is not None and not spill_s > 0:
            raise ValueError(f"spill_s={spill_s!r}; must be > 0, or None (no spilling)")
        self.spill_s = spill_s
        self.workers: Workers | None = None
        self.stopped: dict[str, str] = {}  # host -> why its agent is gone
        self.flows: pd.DataFrame | None = None
        self.t0_ns: int | None = None
        self.coordinator: Coordinator | None = None  # while and after ``run``: ``progress``
        self.coordinator_cpu_s: float | None = None
        self.events_handled = 0
        self.killed: list[dict[str, Any]] = []  # agent_kills carried out (Coordinator.killed)
        self.t_end_ns: int | None = None  # when the run's loop ended (before collecting)
        # Set by whoever saves settled flows during the run (``progress.FlowProgress``'s
        # caller): returns those rows, so the coordinator may forget the flows saved.
        self.saved_flows: Callable[[], pd.DataFrame | None] | None = None

    # ----- lifetime -----------------------------------------------------------------
    def __enter__(self) -> AgentFleet:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def procs(self) -> dict[str, Any]:
        """Worker name -> its process."""
        return {w.name: w.proc for w in self.workers.all} if self.workers else {}

    def start(self) -> None:
        netns = getattr(self.net, "netns", None)
        specs = [
            [{"name": h, "ip": self.ips[h], "netns": netns(h) if netns else None} for h in group]
            for group in self.groups
        ]
        agents_dir = self.run_dir / "agents"
        self.workers = w = Workers(
            agents_dir,
            specs,
            self.cc,
            self.connection,
            self.priority,
            self.ready_timeout_s,
            self.stop_grace_s,
            self.spill_s,
            self.group_sites,
        )
        w.start()
        for wp in w.all:
            rows = agent_rows(self.planned, wp.hosts, self.ips)
            path = agents_dir / f"{wp.name}.schedule.json"
            path.write_text(json.dumps(rows, separators=(",", ":")))
            assert wp.client is not None
            if wp.site is None:
                wp.client.request("load", path=str(path.resolve()))
            else:  # a worker on another machine: the rows over its channel, in parts
                for part, at in enumerate(range(0, max(len(rows), 1), LOAD_PART)):
                    wp.client.request("load", rows=rows[at : at + LOAD_PART], part=part)
        w.subscribe()
        for wp in w.all:
            assert wp.client is not None
            for peer, err in wp.client.request("prepare")["failed"].items():
                log.warning("agent %s could not connect: %s", peer, err)
        log.info(
            "%d hosts in %d agent workers ready (%s, %s)",
            len(self.hosts),
            len(w.all),
            self.cc,
            self.connection,
        )

    def stop_agent(self, host: str, why: str = "stopped") -> None:
        """Stop one host's agent (failure injection): its rows fail, peers are refused."""
        if self.workers is None or host not in self.workers.of_host:
            raise KeyError(f"no agent runs on {host}")
        self.stopped.setdefault(host, f"agent on {host} {why}")
        w = self.workers.of_host[host]
        if w.client is not None:
            w.client.request("stop_host", host=host, why=why)

    def close(self) -> None:
        """Stop every worker this fleet started; safe to call twice."""
        if self.workers is not None:
            self.workers.close()

    # ----- the run ------------------------------------------------------------------
    def status(self) -> dict[str, dict]:
        """Each live worker's counters (rows, released, fired, sent_ok, received, ...)."""
        assert self.workers is not None
        return {w.name: w.client.request("status") for w in self.workers.all if w.client}

    def run(
        self,
        timeout_s: float = 60.0,
        *,
        should_stop: Callable[[], bool] | None = None,
        on_start: Callable[[int], None] | None = None,
        agent_kills: Sequence[tuple[float, str]] = (),
    ) -> pd.DataFrame:
        """Start every agent at a common t0, resolve dependencies (and run the driver)
        until all flows are settled, ``timeout_s`` passed or ``should_stop()`` is true;
        collect and return the merged flows table. ``on_start(t0_ns)`` is called once
        t0 is fixed (fault injection times itself from it). ``agent_kills``: ``(at_s,
        host)`` — that host's agent dies at t0 + at_s real-equivalent seconds (``killed``
        records each). ``timeout_s`` is wall time."""
        if self.flows is not None:
            raise FleetError("a fleet runs its schedule once; make a new AgentFleet")
        if self.workers is None:
            raise FleetError("the fleet is not started: use it as a context manager")
        p = self.planned
        tracker = DependencyTracker.from_schedule(p)
        coord = Coordinator(
            self.workers,
            tracker,
            src_of=dict(zip(p["flow_id"].tolist(), p["src"].tolist(), strict=True)),
            dst_of=dict(zip(p["flow_id"].tolist(), p["dst"].tolist(), strict=True)),
            scale=self.scale,
            tenants=self.tenants,
            ips=self.ips,
            driver=dilated(self.driver, self.scale),
            timer_lead_ns=self.timer_lead_ns,
            udp_grace_ns=int(self.udp_grace_s * 1e9),
            stopped=self.stopped,
        )
        self.coordinator = coord
        t0 = self.t0_ns = time.monotonic_ns() + int(self.start_delay_s * 1e9)
        coord.kills = sorted(
            (t0 + round(self.scale.wall_s(at) * 1e9), host) for at, host in agent_kills
        )
        if on_start is not None:
            on_start(t0)
        cpu0 = time.thread_time()
        switch = sys.getswitchinterval()
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        try:
            with no_full_collections(), thread_priority(self.priority):
                ended = coord.run(t0, time.monotonic_ns() + int(timeout_s * 1e9), should_stop)
        finally:
            self.t_end_ns = time.monotonic_ns()  # the traffic's end, before the collection
            sys.setswitchinterval(switch)
        self.coordinator_cpu_s = time.thread_time() - cpu0
        self.killed = coord.killed
        self.events_handled = coord.messages_handled
        sent, received, cc = self._collect()
        now = time.monotonic_ns()
        outcomes = tracker.outcomes(now, int(self.udp_grace_s * 1e9), ended)
        held = p[p["flow_id"].isin(list(outcomes))] if coord.forgotten else p
        live = live_frame(list(coord.live.values()), self.scale) if coord.live else None
        flows = flows_table(
            held,
            live,
            outcomes,
            tracker.release_ns,
            tracker.t_end,
            sent,
            received,
            cc or self.cc,
            self.connection,
        )
        if coord.forgotten:
            flows = self._with_saved(
                flows, outcomes.keys(), coord.forgotten, sent, received, cc or self.cc
            )
        self.flows = in_run_order(flows, p)
        return self.flows

    def _with_saved(
        self,
        flows: pd.DataFrame,
        held: Iterable[int],
        forgotten: int,
        sent: list[Sent],
        received: list[Received],
        cc: str,
    ) -> pd.DataFrame:
        """``flows`` and the rows of the flows the coordinator forgot once they were
        saved (``saved_flows``), with the workers' records laid over those."""
        assert self.saved_flows is not None
        saved = self.saved_flows()
        if saved is None or not len(saved):
            log.warning("%d flows were saved and forgotten, but none could be read back", forgotten)
            return flows
        saved = saved[~saved["flow_id"].isin(list(held))]  # a flow held is in ``flows``
        if len(saved) < forgotten:
            log.warning(
                "%d flows were saved and forgotten, %d could be read back", forgotten, len(saved)
            )
        saved = with_records(saved, sent, received, cc, self.connection)  # chunks keep dtypes
        return pd.concat([flows, saved], ignore_index=True) if len(flows) else saved

    def _collect(self) -> tuple[list[Sent], list[Received], str]:
        assert self.workers is not None
        sent: list[Sent] = []
        received: list[Received] = []
        cc = ""
        for w in self.workers.all:
            if w.client is None:
                continue
            path = (self.run_dir / "agents" / f"{w.name}.records.json").resolve()
            try:
                if w.site is None:
                    w.client.request("collect", path=str(path))
                    rec = read_records(path)
                else:  # a worker on another machine: the records in its reply, kept here
                    doc = w.client.request("collect")["records"]
                    path.write_text(json.dumps(doc, separators=(",", ":")))
                    rec = records_of(doc)
            except (OSError, FleetError, ValueError) as exc:
                log.warning("could not collect the records of %s: %s", w.name, exc)
                continue
            sent += rec.sent
            received += rec.received
            cc = rec.cc
        return sent, received, cc
