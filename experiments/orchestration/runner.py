"""``kvfabric run``: one spec → one or more runs → results directories.

Everything that can be checked is checked before anything is built (the spec,
every sweep point's fabric and traffic, the output directory, the machine
lock). Each run then owns, innermost last: the controller process, the Mininet
fabric, the samplers, the agents and the fault injector; each is released in
``finally`` (also on SIGINT/SIGTERM: the first signal stops the traffic and keeps
what was recorded, a second Ctrl-C aborts the collection). A run's directory
gets ``summary.json`` with ``"partial": true`` the moment it is created, and the
complete summary only at the end, so nothing half-written looks complete.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd

from controller.policy import compute
from controller.process import ControllerProcess
from controller.tls import RunPKI
from experiments.analysis.estimates import estimate
from experiments.analysis.fidelity import verdict
from experiments.analysis.repeats import repeats_block
from experiments.analysis.summary import summarize
from experiments.measurement import tcpcount
from experiments.measurement.capture import Captures
from experiments.measurement.sampler_process import SamplerProcess
from experiments.measurement.samplers import SamplerError
from experiments.measurement.server_samplers import ClusterSamplers
from experiments.measurement.timebase import WALL_TABLES, real_time_events, real_time_table
from experiments.orchestration.cluster import (
    agents_where,
    clock_offset_ns,
    clock_offsets,
    run_cluster,
    with_local_servers,
)
from experiments.orchestration.deployment import Deployment
from experiments.orchestration.dilation import (
    DEFAULT_MAX_DILATION,
    Dilation,
    choose_dilation,
    shaped_rates,
)
from experiments.orchestration.envelope import DEFAULT, Envelope, figures, machine_identity
from experiments.orchestration.envelope import load as load_envelope
from experiments.orchestration.faults import agent_kills, downed_spans, rate_changes
from experiments.orchestration.live import LiveTables, live_record
from experiments.orchestration.live_view import LiveScreen
from experiments.orchestration.plan import TrafficPlan, controller_params, traffic_plan
from experiments.orchestration.provenance import provenance
from experiments.orchestration.runtime import FaultInjector, RunLock, StopFlag, env_info
from experiments.output import chunks, results
from experiments.spec.capture import targets
from experiments.spec.config import RunConfig, ServingWorkload
from experiments.spec.faults import detect_delays
from experiments.spec.load import RunSpec, Spec, resolved_yaml, spec_sha256
from experiments.spec.typed import resolved_of
from topologies import Fabric
from topologies.builder import Controller, FabricNetwork
from topologies.cleanup import scratch_dir
from topologies.qos import class_plan
from topologies.scale import Scale
from topologies.shaping import max_rate_bps
from traffic.agents import AgentFleet

log = logging.getLogger("kvfabric.runner")

TABLES = ("flows", "requests", "tokens", "queues", "links", "cpu")
DRAIN_S = 5.0  # after duration_s, how long flows still in flight may finish


class RunFailed(RuntimeError):
    """A run could not be carried out (exit code 1); its directory says why."""


class EnvelopeExceeded(RuntimeError):
    """A planned run asks more of this machine than it emulates faithfully at the time
    dilation it may run at (exit code 1); ``lines``: one per figure over its limit, with
    the fixes (and, for ``time_dilation: auto``, why no allowed dilation fits: the one that
    would, and its wall time)."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


@dataclass
class Prepared:
    """A run checked and planned, before anything is built. ``run`` is the run as it will
    be carried out: a spec's ``scale.time_dilation: auto`` is resolved in it (its
    ``spec.yaml`` gives the number; ``dilation.auto`` says it was chosen)."""

    run: RunSpec
    fabric: Fabric
    plan: TrafficPlan  # its ``exceeded`` judged at the chosen dilation
    deployment: Deployment  # the scale and egress plan, built once here; the cluster later
    envelope: Envelope = DEFAULT
    envelope_why: str = ""
    forced: bool = False
    dilation: Dilation | None = None  # None: the spec's, judged as given

    @property
    def config(self) -> RunConfig:
        """The run's configuration, its time dilation resolved (the deployment's scale)."""
        return self.run.config

    @property
    def chosen(self) -> Dilation:
        """The run's time dilation and its wall time."""
        if self.dilation is not None:
            return self.dilation
        return Dilation(self.deployment.scale.d, False, self.run.config.duration_s)

    def envelope_in_force(self) -> dict[str, Any]:
        """Which envelope judged the run (env.json's and the provenance's)."""
        return {"source": self.envelope.source, "calibrated": self.envelope.calibrated}

    def envelope_record(self) -> dict[str, Any]:
        """What summary.json says of the envelope that judged this run (its figures per
        wall second at the run's time dilation) and of that dilation."""
        d = self.deployment.scale.d
        return {
            "source": self.envelope.source,
            "calibrated": self.envelope.calibrated,
            "why": self.envelope_why,
            "fits": not self.plan.exceeded,
            "forced": self.forced,
            "exceeded": self.plan.exceeded,
            "flow_size_scale": {f"workloads.{i}": k for i, k in self.plan.flow_size_scale.items()},
            "figures": {
                f.name: {"peak": f.peak, "limit": f.limit, "unit": f.unit}
                for f in figures(self.plan.demand, self.envelope, d)
            },
            "time_dilation": self.chosen.record(),
        }


@dataclass
class Outcome:
    path: Path
    summary: dict[str, Any]

    @property
    def ok(self) -> bool:
        return not self.summary.get("partial") and not self.summary.get("error")


@dataclass
class Recorded:
    """What a run has recorded so far; written whatever happens."""

    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    events: dict[str, Any] = field(default_factory=dict)
    samplers: dict[str, dict[str, float]] = field(default_factory=dict)
    datapath: str | None = None
    prefix: str | None = None  # the run's name prefix on bridges, veths and namespaces
    error: str = ""
    interrupted: bool = False


def prepare(
    spec: Spec,
    runs: list[RunSpec],
    force: bool = False,
    envelope: tuple[Envelope, str] | None = None,
    max_dilation: float = DEFAULT_MAX_DILATION,
    min_dilation: float = 1.0,
) -> list[Prepared]:
    """Fabric, traffic, demand and time dilation of every run, so a bad sweep point, or
    one this machine cannot emulate faithfully, fails before any build
    (``EnvelopeExceeded``, unless ``force``: then each such run is marked). A
    ``time_dilation: auto`` run gets the smallest dilation from ``min_dilation`` up to
    ``max_dilation`` at which it fits (``dilation.choose_dilation``); a number is judged
    as given. ``envelope``:
    (envelope, why) to judge by, default this machine's own or ``envelope.DEFAULT``."""
    out, over = [], []
    for run in runs:
        fabric, config = run.fabric(), run.config
        auto = config.scale.auto
        # rates and buffers in range, before planning when the spec gives the dilation
        deployment = None if auto else Deployment.of(fabric, config.scale)
        env, why = envelope or load_envelope(machine_identity(mtu=config.scale.mtu), fabric)
        ctl = config.controller
        compute(fabric, ctl.policy, params=controller_params(ctl, config.seed))  # parameters
        try:
            plan = traffic_plan(config, fabric, spec.base_dir, env, 1.0 if auto else config.scale.d)
        except ValueError as exc:
            raise ValueError(f"run {run.label}: {exc}") from exc
        rates = shaped_rates(fabric, config.faults)
        dilation = choose_dilation(
            plan.demand,
            env,
            config.scale,
            rates,
            config.duration_s,
            max_dilation,
            max_rate_bps(),
            min_dilation,
        )
        plan.exceeded = list(dilation.exceeded)  # judged at the chosen d
        if deployment is None:
            run = run.at_time_dilation(dilation.d)
            deployment = Deployment.of(fabric, run.config.scale)
        forced = force and bool(plan.exceeded)
        out.append(Prepared(run, fabric, plan, deployment, env, why, forced, dilation))
        over += [f"run {run.label}: {line}" for line in plan.exceeded]
    if over and not force:
        raise EnvelopeExceeded(over)
    return out


def check_writable(root: Path) -> None:
    """A clear error now rather than after a run: ``root`` must be a writable folder."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=root):
            pass
    except OSError as exc:
        raise results.ResultsError(
            f"cannot write results under {root}: {exc.strerror or exc}"
        ) from None


def run_spec(
    spec: Spec,
    runs: list[RunSpec],
    out_root: Path,
    *,
    progress: Any = None,
    announce: Callable[[str], None] | None = None,
    force: bool = False,
    max_dilation: float = DEFAULT_MAX_DILATION,
    live: LiveScreen | None = None,
    min_dilation: float = 1.0,
) -> list[Outcome]:
    """Carry out ``runs`` one after the other; returns each run's outcome. Raises
    ``RunBusy`` if another run holds the machine and ``EnvelopeExceeded`` if a run does
    not fit it (unless ``force``; ``time_dilation: auto`` from ``min_dilation`` up to
    ``max_dilation``), before
    building anything. ``live``: the screen that shows each run as it stands
    (``kvfabric run --live``; it is then the ``progress`` too)."""
    prepared = prepare(spec, runs, force, max_dilation=max_dilation, min_dilation=min_dilation)
    out_root = Path(out_root)
    check_writable(out_root)
    from topologies.machine import preflight

    preflight()  # root, Mininet, OVS: a clear "cannot run" before the lock
    outcomes: list[Outcome] = []
    with RunLock(spec.name), StopFlag(announce) as stop:
        for p in prepared:
            if stop:
                log.warning("not starting run %s: the run was interrupted", p.run.label)
                break
            outcomes.append(execute(p, out_root, stop, progress, live))
    record_repeats(outcomes)
    return outcomes


def record_repeats(outcomes: list[Outcome]) -> None:
    """Into each summary.json of a sweep point run more than once (``--repeat``): the
    spread of its primary metrics across those runs (``analysis.repeats``)."""
    by_point: dict[str, list[Outcome]] = {}
    for o in outcomes:
        point = {k: v for k, v in (o.summary.get("point") or {}).items() if k != "seed"}
        key = json.dumps(point, sort_keys=True, default=str)
        by_point.setdefault(key, []).append(o)
    for group in by_point.values():
        block = repeats_block([o.summary for o in group]) if len(group) > 1 else None
        if block is None:
            continue
        for o in group:
            o.summary["repeats"] = block
            results.write_json(o.path, "summary", o.summary)


def execute(
    p: Prepared,
    out_root: Path,
    stop: StopFlag,
    progress: Any = None,
    live: LiveScreen | None = None,
) -> Outcome:
    """One run: build, run, collect, judge, write. Never raises for a failed run:
    the failure is in the outcome's summary (``error``, ``partial``)."""
    run, config = p.run, p.run.config
    started = datetime.now()
    run_dir = results.new_run_dir(out_root, run.experiment, run.seed, started)
    (run_dir / "spec.yaml").write_text(resolved_yaml(run))
    base = {
        "experiment": run.experiment,
        "run_id": run_dir.name,
        "label": run.label,
        "seed": run.seed,
        "point": run.point,
        "scale": config.scale.bandwidth,
        "time_dilation": p.deployment.scale.d,  # wall seconds per real-equivalent second
        "started": started.isoformat(timespec="seconds"),
        "provenance": provenance(spec_sha256(run), p.envelope_in_force()),
    }
    results.write_json(
        run_dir,
        "summary",
        base
        | {
            "partial": True,
            "error": "run in progress",
            "live_tables": live_record(config.sampler.flush_s, config.agents.flush_s),
        },
    )
    rec = Recorded()
    scratch = scratch_dir()  # short paths for Unix sockets; kvfabric clean knows it
    task = progress.add_task(f"{run.label}: building", total=None) if progress else None

    def say(text: str, **kw: Any) -> None:
        if progress is not None:
            progress.update(task, description=f"{run.label}: {text}", **kw)

    try:
        _carry_out(p, run_dir, scratch, stop, rec, say, live)
    except KeyboardInterrupt:
        rec.interrupted, rec.error = True, "aborted by a second Ctrl-C; recording incomplete"
    except Exception as exc:
        log.debug("run %s failed", run.label, exc_info=True)
        rec.error = f"{type(exc).__name__}: {exc}"
        _keep_traceback(run_dir, exc)
    finally:
        _keep_logs(scratch, run_dir)
        shutil.rmtree(scratch, ignore_errors=True)
    say("writing results")
    summary = _finish(p, run_dir, rec, base, stop)
    if progress is not None:
        progress.update(task, description=f"{run.label}: done", total=1, completed=1)
    return Outcome(run_dir, summary)


@contextmanager
def fabric_up(
    fabric: Fabric,
    config: RunConfig,
    scratch: Path,
    say: Callable[..., None] = lambda *a, **k: None,
    *,
    deployment: Deployment,
) -> Iterator[tuple[ControllerProcess, FabricNetwork, Deployment]]:
    """The spec's controller (own process) and fabric, every rule installed; both are
    released on exit, whatever happens (and a run's TLS PKI, ``controller.tls``, with
    them). ``deployment``: the run's scale and egress plan (``Deployment.of``); what is
    yielded with the controller and the network also has the run's cluster (None on one
    machine). ``kvfabric run`` and ``kvfabric cli`` use it."""
    ctl = config.controller
    params = controller_params(ctl, config.seed)
    qos = class_plan(ctl.qos.classes, ctl.qos.default_class) if ctl.qos.classes else None
    scale = deployment.scale
    detect = detect_delays(resolved_of(config.faults), fabric)
    with contextlib.ExitStack() as stack:
        local = config.cluster.local if config.cluster is not None else None
        if local:  # the run's own local cluster, removed with the run
            from topologies.cluster.local import down, up

            say(f"starting a local cluster of {local} servers")
            rec = up(local, for_run=True)
            stack.callback(down, rec)
            config = with_local_servers(config, [s.address for s in rec.plan().servers])
        cluster = run_cluster(config, fabric)
        deployment = deployment.on(cluster)
        # switches on other servers reach the controller on this machine's cluster address,
        # over TLS only (never plain OpenFlow off loopback)
        host = cluster.coordinator if cluster else "127.0.0.1"
        tls = (
            stack.enter_context(
                RunPKI(addresses=tuple(dict.fromkeys(["127.0.0.1", host])), parent=scratch)
            )
            if ctl.tls or cluster
            else None
        )
        proc = stack.enter_context(
            ControllerProcess(
                fabric,
                ctl.policy,
                scratch / "controller",
                params,
                detect_ms=detect,
                time_dilation=scale.d,  # its timers run d times slower, as the run's
                tls=tls,
                listen_host=host,
            )
        )
        switch_tls = (
            (str(tls.path("switch.key")), str(tls.path("switch.pem")), str(tls.path("ca.pem")))
            if tls
            else None
        )
        say("building the fabric" + (f" on {len(cluster.servers)} servers" if cluster else ""))
        kw = {
            "controller": Controller(host=host, port=proc.port, tls=switch_tls),
            "qos": qos,
            "plan": list(deployment.plan),
            "transport": config.transport,  # TCP timers x the dilation (topologies.transport)
        }
        if cluster:
            from topologies.cluster.network import ClusterNetwork

            net = stack.enter_context(
                ClusterNetwork(
                    fabric,
                    scale,
                    servers=cluster.servers,
                    machine_of=cluster.machine_of,
                    link=cluster.link,
                    **kw,
                )
            )
        else:
            net = stack.enter_context(FabricNetwork(fabric, scale, **kw))
        say("waiting for the controller")
        proc.wait_ready(timeout_s=60)
        yield proc, net, deployment
        say("tearing down")


def _carry_out(
    p: Prepared,
    run_dir: Path,
    scratch: Path,
    stop: StopFlag,
    rec: Recorded,
    say: Callable[..., None],
    live: LiveScreen | None = None,
) -> None:
    with fabric_up(p.fabric, p.run.config, scratch, say, deployment=p.deployment) as (
        proc,
        net,
        deployed,
    ):
        rec.datapath, rec.prefix = net.datapath, net.prefix
        env = env_info(net.datapath) | provenance(spec_sha256(p.run), p.envelope_in_force())
        env |= {
            "ovs_tx_buffer_bytes": net.tx_buffer,  # topologies.ovs_tx: None if unchanged
            "cpu_wakeup_latency": net.wakeup.describe(),  # topologies.wakeup
        }
        cluster = deployed.cluster
        if cluster is not None:
            say("measuring the servers' clocks")
            clock = {"start": clock_offsets(cluster)}
            env["cluster"] = cluster.to_dict() | {
                "ovs_tx_buffer_bytes": net.tx_buffers,
                "clock": clock,
            }
        results.write_json(run_dir, "env", env)
        if stop:
            raise InterruptedError("interrupted before the traffic started")
        try:
            _traffic(
                p,
                net,
                deployed,
                run_dir,
                scratch,
                stop,
                rec,
                say,
                proc,
                clock["start"] if cluster is not None else None,
                live,
            )
        finally:
            record_controller(proc, rec)
            if cluster is not None:  # and at the end: a clock that drifted shows
                env["cluster"]["clock"]["end"] = clock_offsets(cluster)
                results.write_json(run_dir, "env", env)


def record_controller(proc: ControllerProcess, rec: Recorded) -> None:
    """The controller's event log and errors into ``rec.events``; a controller that
    reported an error (or cannot be asked) fails the run: ``rec.error`` says so."""
    try:
        rec.events["controller"] = proc.events()
        errors = proc.errors()
    except (OSError, ValueError) as exc:
        errors = [f"channel unreachable: {exc}"]
    rec.events["controller_errors"] = errors
    if errors and not rec.error:
        first = errors[0].strip().splitlines()[0] if errors[0].strip() else "(empty)"
        rec.error = (
            f"the controller reported {len(errors)} error(s) (events.json controller_errors, "
            f"logs/controller.log); the first: {first}"
        )


def _traffic(
    p: Prepared,
    net: FabricNetwork,
    deployed: Deployment,
    run_dir: Path,
    scratch: Path,
    stop: StopFlag,
    rec: Recorded,
    say: Callable[..., None],
    controller: ControllerProcess | None = None,
    clock: Mapping[str, Any] | None = None,
    live: LiveScreen | None = None,
) -> None:
    cfg = p.run.config
    scale = deployed.scale  # d: every wall-clock time below is the real one x d
    sampler_hz = cfg.sampler.rate_hz / scale.d  # as many samples per real-equivalent second
    ports = {
        net.intf(e.node, e.port): (e.node, e.port)
        for e in net.plan
        if not p.fabric.node(e.node).is_host
    }
    if deployed.cluster is not None:
        offsets = {
            str(s): clock_offset_ns(s, clock or {})
            for s in deployed.cluster.servers
            if not s.is_local
        }
        samplers: Any = ClusterSamplers(
            net,
            scratch / "samplers",
            sampler_hz,
            chunks_dir=run_dir,
            flush_s=cfg.sampler.flush_s,
            offsets_ns=offsets,
        )
    else:
        samplers = SamplerProcess(
            scratch / "samplers",
            ports,
            sampler_hz,
            chunks_dir=run_dir,
            flush_s=cfg.sampler.flush_s,
            link_ports=ports,
        )
    faults = FaultInjector(net, cfg.faults, controller, scale=scale)
    cap = cfg.capture
    window = tuple(scale.wall_s(t) for t in cap.window_s) if cap.window_s else None
    captures = Captures(
        net, run_dir / "captures", targets(p.fabric, list(cap.at)), cap.snaplen, cap.max_mb, window
    )
    duration = scale.wall_s(cfg.duration_s)  # wall seconds, for the progress bar
    try:
        samplers.start()
        if window is None:
            captures.start()  # before the agents connect: every stream from its first byte
        say("starting agents")
        sites, processes = agents_where(net, deployed.cluster, cfg.agents.processes, clock)
        fleet = AgentFleet(
            net,
            run_dir,
            p.plan.schedule,
            deployed.scale,
            cc=cfg.agents.cc,
            connection=cfg.agents.connection,
            processes=processes,
            driver=p.plan.driver,
            sites=sites,
        )
        with (
            fleet,
            LiveTables(run_dir, fleet, p.plan.driver, cfg.agents.flush_s) as tables,
            live.watch(p, deployed, run_dir, fleet, tables, sampler_hz, duration)
            if live is not None
            else contextlib.nullcontext(),
        ):
            t_start = [0.0]

            def started(t0_ns: int) -> None:
                t_start[0] = time.monotonic()
                faults.start(t0_ns)
                if window is not None:
                    captures.start(t0_ns)

            watch = ServerWatch(net)

            def should_stop() -> bool:
                if t_start[0]:
                    say("running", total=duration, completed=time.monotonic() - t_start[0])
                failed = watch.failed()
                if failed and not rec.error:
                    when = (
                        f"{time.monotonic() - t_start[0]:.1f} s after the traffic started"
                        if t_start[0]
                        else "before the traffic started"
                    )
                    rec.error = (
                        f"server {', '.join(failed)} failed mid-run (its ssh sessions "
                        f"ended {when}); the tables hold what was recorded until "
                        "then"
                    )
                return bool(stop) or bool(failed)

            say("running", total=duration, completed=0)
            hosts = [h.name for h in p.fabric.hosts]
            intfs = {
                net.intf(sw.name, lk.port_of(sw.name))
                for sw in p.fabric.switches
                for lk in p.fabric.links_of(sw.name)
            }
            tcp_before = tcpcount.host_counters(net, hosts)
            sw_before = tcpcount.fabric_switch_counters(net, intfs)
            try:
                rec.tables["flows"] = fleet.run(
                    timeout_s=scale.wall_s(cfg.duration_s + DRAIN_S),
                    should_stop=should_stop,
                    on_start=started,
                    agent_kills=agent_kills(cfg.faults),
                )
            finally:
                # the traffic's end, not the collection's: what the CPU and queue checks
                # judge (collecting 200,000 flows' records takes seconds of a core)
                rec.events["t_end_ns"] = fleet.t_end_ns or time.monotonic_ns()
                tcp_after = tcpcount.host_counters(net, hosts)
                rec.events["tcp"] = tcpcount.delta(tcp_before, tcp_after)
                rec.events["counters"] = tcpcount.ledger(
                    {"hosts": tcp_before, "switches": sw_before},
                    {"hosts": tcp_after, "switches": tcpcount.fabric_switch_counters(net, intfs)},
                )
                faults.stop()
                rec.events["faults"] = applied_faults(faults.applied, fleet, scale)
                if cap.at:
                    rec.events["captures"] = captures.stop()
                rec.events["t0_ns"] = fleet.t0_ns
            if stop:
                rec.interrupted = True
            say("collecting")
            driver = p.plan.driver
            rec.events["agents"] = {
                "processes": len(fleet.procs),
                "coordinator_cpu_s": fleet.coordinator_cpu_s,
                "events": fleet.events_handled,
            }
            if driver is not None:
                rec.tables["requests"] = driver.requests_table()
                rec.tables["tokens"] = driver.tokens_table()
                rec.events["serving"] = driver.cache_stats()
    finally:
        if cap.at and "captures" not in rec.events:  # the traffic never started
            rec.events["captures"] = captures.stop()
        try:
            samplers.stop()
        except SamplerError as exc:  # a sampler's failure is reported, not fatal
            rec.error = rec.error or f"sampler failed: {exc}"
        for name in ("queues", "links", "cpu"):
            rec.tables[name] = samplers.table(name)
        rec.samplers = samplers.rates()


class ServerWatch:
    """Which servers of a cluster run have failed, looked at most every ``every_s``
    (``ClusterNetwork.failed_servers``; one machine has none)."""

    def __init__(self, net: FabricNetwork, every_s: float = 0.25) -> None:
        self.look = net.failed_servers
        self.every_s, self.next_s, self.seen = every_s, 0.0, []

    def failed(self) -> list[str]:
        now = time.monotonic()
        if not self.seen and now >= self.next_s:
            self.next_s = now + self.every_s
            self.seen = self.look()
        return self.seen


def applied_faults(
    injected: list[dict[str, Any]], fleet: AgentFleet, scale: Scale
) -> list[dict[str, Any]]:
    """The injector's rows and the coordinator's agent kills, as one timeline (``at_s``:
    real-equivalent, as the spec gives it; the rest on the wall clock until the tables
    are written)."""
    t0 = fleet.t0_ns or 0
    kills = [
        {
            "at_s": scale.real_s((k["due_ns"] - t0) / 1e9),
            "event": "agent_kill",
            "fault": "agent_kill",
            "node": k["node"],
            "t_start_ns": k["t_start_ns"],
            "t_ns": k["t_ns"],
            "late_ms": (k["t_start_ns"] - k["due_ns"]) / 1e6,
            "ok": k["ok"],
            "error": k["error"],
        }
        for k in fleet.killed
    ]
    return sorted(injected + kills, key=lambda row: row["t_start_ns"])


def compute_provenance(config: RunConfig) -> dict[str, Any] | None:
    """Which compute model (profiled or roofline) timed the serving workload's steps."""
    from traffic import compute

    for w in config.workloads:
        if isinstance(w, ServingWorkload):
            tps = [w.prefill.tp] + ([w.decode.tp] if w.decode else [])
            return compute.provenance(w.model, w.gpu, tps)
    return None


def traffic_window(table: pd.DataFrame, events: dict[str, Any]) -> pd.DataFrame:
    """The rows of a sampled table taken while the traffic ran (t0 to the end of
    the fleet's run), when both instants are known. A run shorter than the sampling
    period may fall between two samples: it then gets the first sample after its end,
    which stands for the interval that holds it (a CPU sample is the share of the time
    since the one before)."""
    t0, t1 = events.get("t0_ns"), events.get("t_end_ns")
    if t0 is None or t1 is None or "t_ns" not in table:
        return table
    inside = table[(table["t_ns"] >= t0) & (table["t_ns"] <= t1)]
    if len(inside):
        return inside
    after = table[table["t_ns"] > t1]
    return after.loc[[after["t_ns"].idxmin()]] if len(after) else inside


def _keep_traceback(run_dir: Path, exc: BaseException) -> None:
    """An unexpected failure's traceback, ``logs/traceback.txt``: the summary's one-line
    ``error`` names the exception, this says where it was raised."""
    logs = run_dir / "logs"
    logs.mkdir(exist_ok=True)
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    (logs / "traceback.txt").write_text(text, encoding="utf-8")


def _keep_logs(scratch: Path, run_dir: Path) -> None:
    logs = run_dir / "logs"
    sampler_logs = {p.parent.name: p for p in (scratch / "samplers").glob("*/samplers.log")}
    for path in [*(scratch / "controller").glob("*"), scratch / "samplers" / "samplers.log"]:
        if path.exists() and path.suffix in (".log", ".stderr", ".json"):
            logs.mkdir(exist_ok=True)
            shutil.copy2(path, logs / path.name)
    for where, path in sampler_logs.items():  # a cluster run's: one per server
        logs.mkdir(exist_ok=True)
        shutil.copy2(path, logs / f"samplers-{where}.log")


def write_tables(run_dir: Path, rec: Recorded, scale: Scale | None = None) -> dict[str, str]:
    """Each table of the run: the complete one if the run has it (its chunks, saved as the
    run went, are then dropped), else what its chunks hold, gathered into the table (the
    run stopped before it had the complete one: an error, a second Ctrl-C, a sampler
    process that died). Returns table -> ``complete`` or ``recovered``; a table with
    neither is left out. At a time dilation (``scale``), the tables measured on the wall
    clock and the events are written in real-equivalent time
    (``experiments.measurement.timebase``), and ``rec`` holds them so."""
    sources: dict[str, str] = {}
    t0 = rec.events.get("t0_ns")
    dilated = scale is not None and scale.d != 1 and t0 is not None
    for name in TABLES:
        table = rec.tables.get(name)
        if table is not None and (len(table) or not chunks.chunk_paths(run_dir, name)):
            sources[name] = "complete"
        elif chunks.compact(run_dir, name) is not None:
            table = results.read_table(run_dir, name)
            sources[name] = "recovered"
        else:
            chunks.discard(run_dir, name)
            continue
        convert = dilated and name in WALL_TABLES
        if convert:
            table = real_time_table(table, scale, t0)
        rec.tables[name] = table
        if convert or sources[name] == "complete":  # a recovered one is written already
            results.write_table(run_dir, name, table)
        chunks.discard(run_dir, name)
    if dilated:
        rec.events = real_time_events(rec.events, scale, t0)
    return sources


def _finish(
    p: Prepared, run_dir: Path, rec: Recorded, base: dict[str, Any], stop: StopFlag
) -> dict[str, Any]:
    """Write the tables, judge fidelity, compute metrics, write summary and report."""
    config = p.run.config
    scale = p.deployment.scale
    sources = write_tables(run_dir, rec, scale)
    results.write_json(run_dir, "events", rec.events)
    empty = pd.DataFrame()
    t = {name: rec.tables.get(name, empty) for name in TABLES}
    # the plan the fabric was shaped by, per real-equivalent second as the tables read
    rates = {port: bps * scale.d for port, bps in p.deployment.rates_bps.items()}
    partial = rec.interrupted or bool(stop) or bool(rec.error)
    try:
        cpu = traffic_window(t["cpu"], rec.events)  # not agent start-up or teardown
        tcp = tcpcount.totals(rec.events["tcp"]) if rec.events.get("tcp") else None
        if tcp is not None:
            tcp |= tcpcount.unmodelled_places(rec.events.get("counters") or {})
        fidelity = verdict(
            t["flows"],
            t["queues"],
            cpu,
            rec.samplers,
            rates,
            p.fabric,
            config.fidelity,
            # the machine's switching capacity per real-equivalent second: d x its wall rate
            capacity_mbps=lambda hops: p.envelope.capacity_mbps(hops) * scale.d,
            tcp=tcp,
            mtu=p.deployment.scale.mtu,
            rate_changes=rate_changes(rec.events.get("faults") or [], p.fabric, p.deployment.scale),
            links=t["links"],
            downed=downed_spans(rec.events.get("faults") or [], p.fabric),
        )
    except Exception as exc:
        log.debug("fidelity verdict failed", exc_info=True)
        fidelity = {"ok": False, "checks": {}, "error": f"could not judge: {exc}"}
    try:
        metrics = summarize(
            t["flows"],
            t["requests"],
            t["tokens"],
            t["queues"],
            config,
            links=t["links"],
            events=rec.events,
        )
    except Exception as exc:
        log.debug("summary failed", exc_info=True)
        metrics = {}
        rec.error = rec.error or f"metrics could not be computed: {exc}"
    try:
        predicted = estimate(config, p.fabric, p.plan.spare_driver())
    except Exception as exc:  # an estimate must never cost a run its results
        log.warning("analytic estimate failed: %s", exc)
        predicted = {"error": str(exc)}
    if rec.interrupted and not rec.error:
        rec.error = "interrupted: the traffic was stopped early; the tables hold what was recorded"
    summary = base | {
        "ended": datetime.now().isoformat(timespec="seconds"),
        "partial": partial,
        "interrupted": bool(rec.interrupted or stop),  # a Ctrl-C cut it short
        "error": rec.error or None,
        "datapath": rec.datapath,
        "run_prefix": rec.prefix,
        "fidelity": fidelity,
        "samplers": rec.samplers,
        "metrics": metrics,
        "estimate": predicted,
        "envelope": p.envelope_record(),
        "compute": compute_provenance(config),
        "tables": sources,
    }
    results.write_json(run_dir, "summary", summary)
    try:
        from experiments.output.report import write_report

        write_report([run_dir])
    except Exception as exc:
        log.warning("report for %s could not be written: %s", run_dir, exc)
    return summary
