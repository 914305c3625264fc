"""``kvfabric calibrate``: measure this machine's emulation envelope with the machinery
the runs use, and store it where ``envelope.load`` finds it.

Three figures, each found by a search over a steady load: from the default
envelope's figure up by half or down by half until one step is judged faithful by
the fidelity verdict (the same checks a run gets) and one is not, then halving the
gap between them (once with ``--quick``, three times in full). The figure is the
largest faithful step below the smallest unfaithful one, in the unit a run's plan
is judged by (peak over 100 ms windows):

- **switch-hop work** for paths of 1, 3 and 5 switches (``spine_leaf`` 1 leaf,
  ``spine_leaf`` 2 × 2, ``fat_tree`` k=4 across pods): two one-to-one streams and
  one two-to-one incast, each a chunk every 50 ms at its fair share of the host
  rate, so 3 host links' worth of payload crosses every switch of the path;
- **message-hops/s** by size class (``small``: one segment, ``bulk``: 4 KB):
  Poisson messages between random pairs of 8 hosts, the load far below the links';
- **sampler cost**: the queue sampler's netlink dump, µs per port per tick.

Each step is measured as a run is: the spec's controller in its own process and the
fabric (``runner.fabric_up``), the sampler process started before the agents, the
agent workers, TCP's and the switches' counters, and ``fidelity.verdict`` over the
traffic window with the spec's default thresholds.

Connections open at once are not measured: the default's figure is kept and the
stored envelope says so. What a step measures, and why it failed, is kept in the
stored file beside the figures (``steps``), so a surprising envelope can be read.

Each step also records the load the machine was under (``load``): the steal the host
took during the trial, the longest stretch a core stayed saturated in the second
before the fabric came up (work outside the run), and the machine's stalls during the
trial (``measurement.stalls``: stretches of ≥ 1 ms in which a real-time probe could not
run, so no agent could either), with the agents' lateness p99 over the flows no stall
overlapped. A refusal (no faithful step) is *explained* only when its lowest step (the
one the figure was refused at) failed under such load, or failed lateness alone and the
flows no stall touched were on time (:func:`refusal_cause`); an unexplained refusal is
a regression, not a busy machine. The higher steps of a refused figure failing is what
the search expects (it starts above the machine's capacity), so they do not decide it.
"""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from controller.ofctl import StaticRules
from experiments.analysis.fidelity import (
    BUSY_STEAL_PCT,
    MAX_SATURATED_S,
    SATURATED_CORE_PCT,
    lateness_apart_from_stalls,
    offered_switching_mbps,
    saturated_core_s,
    switch_counter,
    verdict,
)
from experiments.measurement import tcpcount
from experiments.measurement.sampler_process import SamplerProcess
from experiments.measurement.samplers import CpuSampler, QueueSampler
from experiments.measurement.stalls import StallProbe
from experiments.orchestration.demand import SMALL_BYTES, WINDOW_NS, schedule_demand
from experiments.orchestration.deployment import Deployment
from experiments.orchestration.envelope import DEFAULT, Envelope, machine_identity
from experiments.orchestration.runner import fabric_up, traffic_window
from experiments.orchestration.trial import failed_checks, switch_ports
from experiments.spec.load import expand, load_spec
from experiments.spec.sections import build_fabric
from topologies import Fabric, FabricError
from topologies.builder import FabricNetwork
from topologies.machine import ovs_kernel_datapath
from topologies.scale import DEFAULT_MTU, Scale, check_mtu
from topologies.shaping import egress_plan, max_rate_bps
from traffic.agents import AgentFleet
from traffic.workloads.schedule import build_schedule

HOST_GBPS = 100.0
CHUNKS_PER_S = 20  # each stream is a run of chunks, so lateness is judged over many sends
HOST_LINKS_DELIVERED = 3  # 2 one-to-one streams + the receiver of a 2-to-1 incast
_LEAF = {"kind": "spine_leaf", "host_gbps": HOST_GBPS, "uplink_gbps": 4 * HOST_GBPS}
# path length -> its fabric (a spec section) and pairs, the last two an incast; the
# 1-switch fabric's one uplink carries nothing, so it is no faster than a host link
INCAST_PAIRS = {
    1: (
        _LEAF | {"spines": 1, "leaves": 1, "hosts_per_leaf": 8, "uplink_gbps": HOST_GBPS},
        [("h0", "h4"), ("h1", "h5"), ("h2", "h6"), ("h3", "h6")],
    ),
    3: (
        _LEAF | {"spines": 2, "leaves": 2, "hosts_per_leaf": 4},
        [("h0", "h4"), ("h1", "h5"), ("h2", "h6"), ("h3", "h6")],
    ),
    5: (
        {"kind": "fat_tree", "k": 4, "host_gbps": HOST_GBPS, "fabric_gbps": 4 * HOST_GBPS},
        [("h0", "h4"), ("h1", "h8"), ("h2", "h12"), ("h3", "h12")],
    ),
}
BEYOND_LINK_RATE = "link_rate: beyond what one emulated link honours"


def make_fabric(section: dict[str, Any]) -> Fabric:
    """The fabric of a spec's ``fabric:`` section."""
    return build_fabric(section)


MESSAGE_BYTES = {"small": 1000, "bulk": 4096}  # emulated bytes of one message
MESSAGE_SCALE = 1e-3  # host links at 100 Mbit/s: messages never wait for bandwidth
REFINE = {"full": 3, "quick": 1}  # halvings of the gap between faithful and not
MAX_BRACKET_STEPS = 6  # up by 1.5x (or down by 2x) at most this often


IDLE_SAMPLE_S = 1.0  # the machine's load sampled before each trial, nothing of it running


class CalibrationError(RuntimeError):
    """No step of a figure was faithful: this machine (or its load now) emulates nothing
    at the smallest step; the message names the checks that failed. ``steps`` are the
    figure's steps and ``cause`` the measured load that explains the refusal (None: the
    machine was not measurably loaded, so the refusal is unexplained)."""

    def __init__(self, message: str, steps: Sequence[Step] = (), cause: str | None = None):
        super().__init__(message)
        self.steps = list(steps)
        self.cause = cause


@dataclass
class Step:
    """One load tried: what was planned, what the plan's peak was, what was judged."""

    figure: str  # "switch_hop_mbps:3", "messages_per_s:small"
    planned: float  # the load asked for, in the figure's unit
    peak: float  # the plan's peak over 100 ms windows, in the figure's unit
    carried: float | None  # what the flows carried (switch-hop Mbit/s), where measured
    faithful: bool
    failed: list[str] = field(default_factory=list)
    checks: dict[str, Any] = field(default_factory=dict)
    # the machine's load: "steal_pct" (mean over the trial), "busy_core_outside_s" (longest
    # saturated-core stretch in the second before the fabric came up)
    load: dict[str, float] = field(default_factory=dict)


def busy_machine(load: dict[str, float]) -> str | None:
    """Why a step's machine was too loaded to judge the emulation (the rules the shaped
    rate tests and the cpu check use), or None when it was not measurably loaded."""
    steal = load.get("steal_pct")
    outside = load.get("busy_core_outside_s")
    if steal is not None and steal >= BUSY_STEAL_PCT:
        return f"the host took {steal:.0f}% of the CPU (steal; busy from {BUSY_STEAL_PCT:g}%)"
    if outside is not None and outside >= MAX_SATURATED_S:
        return (
            f"a core was at ≥ {SATURATED_CORE_PCT:g}% for {outside:.1f} s before the run"
            f" started (work outside the run; busy from {MAX_SATURATED_S:g} s)"
        )
    return None


def stalled_machine(step: Step) -> str | None:
    """Why a step that failed lateness alone failed it because the machine stalled: the
    flows no stall overlapped were on time (their p99 within the check's limit), and the
    late ones waited through a stall. None otherwise (or when stalls were not measured)."""
    load = step.load
    p99, limit = load.get("lateness_p99_unstalled_ms"), load.get("lateness_limit_ms")
    if set(step.failed) != {"lateness"} or p99 is None or limit is None or p99 > limit:
        return None
    return (
        f"{load.get('stalls', 0):.0f} machine stalls ≥ 1 ms (longest "
        f"{load.get('stall_ms_max', 0):.1f} ms) overlapped {load.get('stalled_flows', 0):.0f}"
        f" flows' starts; the other {load.get('unstalled_flows', 0):.0f} were on time "
        f"(p99 {p99:.2f} ms ≤ {limit:g})"
    )


def refusal_cause(steps: Sequence[Step]) -> str | None:
    """The measured load that explains a figure with no faithful step: its lowest step
    (the load it was refused at) ran on a busy machine (:func:`busy_machine`) or failed
    lateness only because the machine stalled (:func:`stalled_machine`). None when it
    did neither (or its load was not measured): the refusal is the emulation's."""
    failed = [s for s in steps if not s.faithful]
    if not failed or any(s.faithful for s in steps):
        return None
    least = min(failed, key=lambda s: s.planned)
    cause = busy_machine(least.load) or stalled_machine(least)
    return f"at {least.planned:,.0f}: {cause}" if cause else None


def largest_faithful(steps: Sequence[Step]) -> float | None:
    """The figure: the largest peak among faithful steps below the smallest unfaithful
    one (a load above a failure is not trusted even if it passed by luck)."""
    best = None
    for s in sorted(steps, key=lambda s: s.planned):
        if not s.faithful:
            break
        best = s.peak if best is None else max(best, s.peak)
    return best


def search(guess: float, mode: str, run_step: Callable[[float], Step]) -> list[Step]:
    """The steps of one figure's search (see the module docstring), in the order run."""
    steps: list[Step] = []

    def faithful(load: float) -> bool:
        steps.append(run_step(load))
        return steps[-1].faithful

    lo = hi = None
    load = guess
    for _ in range(MAX_BRACKET_STEPS):
        if faithful(load):
            lo, load = load, load * 1.5
        else:
            hi, load = load, load / 2
        if lo is not None and hi is not None:
            break
    if lo is None or hi is None:
        return steps  # never faithful, or faithful far above the guess
    for _ in range(REFINE[mode]):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if faithful(mid) else (lo, mid)
    return steps


# ----- loads (pure) --------------------------------------------------------------------
def hop_schedule(
    pairs: Sequence[tuple[str, str]], rate_mbps: float, seconds: float, scale: float
) -> pd.DataFrame:
    """Each pair sends a chunk every 1/CHUNKS_PER_S s, sized so its fair share (the full
    host rate, or half of it for the two senders into the incast receiver) carries it."""
    full = rate_mbps * 1e6 / CHUNKS_PER_S / 8 / scale  # real-equivalent bytes per chunk
    sizes = [full, full, full / 2, full / 2]
    chunks = int(seconds * CHUNKS_PER_S)
    t = (np.arange(chunks) * 1e9 / CHUNKS_PER_S).astype(np.int64)
    n = len(pairs) * chunks
    return build_schedule(
        {
            "kind": ["background"] * n,
            "tenant": ["calibrate"] * n,
            "src": [p[0] for p in pairs for _ in t],
            "dst": [p[1] for p in pairs for _ in t],
            "bytes": np.array([int(sz) for sz in sizes for _ in t]),
            "t_sched_ns": np.tile(t, len(pairs)),
            "chunk": np.tile(np.arange(chunks), len(pairs)),
        }
    )


def message_schedule(
    hosts: Sequence[str], per_s: float, size_bytes: int, seconds: float, scale: float, seed: int = 0
) -> pd.DataFrame:
    """Poisson messages at ``per_s`` between random distinct pairs of ``hosts``, each
    ``size_bytes`` emulated (``size_bytes / scale`` real-equivalent)."""
    rng = np.random.default_rng(seed)
    n = max(1, int(per_s * seconds))
    t = np.cumsum(rng.exponential(1e9 / per_s, size=n)).astype(np.int64)
    src = rng.integers(0, len(hosts), size=n)
    dst = (src + rng.integers(1, len(hosts), size=n)) % len(hosts)
    return build_schedule(
        {
            "kind": ["background"] * n,
            "tenant": ["calibrate"] * n,
            "src": [hosts[i] for i in src],
            "dst": [hosts[i] for i in dst],
            "bytes": np.full(n, int(size_bytes / scale)),
            "t_sched_ns": t,
        }
    )


def peak_hop_mbps(schedule: pd.DataFrame, fabric: Fabric, scale: float) -> float:
    demand = schedule_demand(schedule, fabric, scale)
    bits = sum(np.pad(b, (0, demand.windows - len(b))) for b in demand.hop_bits.values())
    return float(np.max(bits)) / (WINDOW_NS / 1e9) / 1e6


def peak_message_hops(schedule: pd.DataFrame, fabric: Fabric, scale: float, cls: str) -> float:
    starts = schedule_demand(schedule, fabric, scale).starts.get(cls)
    return 0.0 if starts is None else float(np.max(starts)) / (WINDOW_NS / 1e9)


# ----- measurement (root) ----------------------------------------------------------------
def load_outside_run(seconds: float = IDLE_SAMPLE_S) -> float:
    """The longest stretch (s) a core stayed saturated over ``seconds`` with nothing of
    the run up: work on this machine that is not the run's."""
    with CpuSampler() as sampler:
        time.sleep(seconds)
    return saturated_core_s(sampler.table())


def run_trial(
    fabric_section: dict[str, Any],
    schedule: pd.DataFrame,
    scale: float,
    seconds: float,
    mtu: int = DEFAULT_MTU,
    fabric: Fabric | None = None,
) -> tuple[pd.DataFrame, dict[str, Any], dict[str, float]]:
    """``schedule`` on the fabric of ``fabric_section`` (a spec's ``fabric:``; or
    ``fabric``, that fabric with other link rates: ``trial_fabric``) at ``mtu``, measured
    and judged as ``kvfabric run`` measures and judges: the flows, the verdict and the
    machine's load (``Step.load``)."""
    text = yaml.safe_dump(
        {
            "name": "calibrate",
            "duration_s": seconds,
            "fabric": fabric_section,
            "scale": {"bandwidth": scale, "mtu": mtu},
        }
    )
    (run,) = expand(load_spec(text))
    config, fabric = run.config, fabric or run.fabric()
    deployment = Deployment.of(fabric, config.scale)
    outside_s = load_outside_run()
    probe = StallProbe()
    with tempfile.TemporaryDirectory(prefix="kvfabric-calibrate-") as tmp:
        scratch = Path(tmp)
        with fabric_up(fabric, config, scratch, deployment=deployment) as (_, net, _):
            ports = switch_ports(net)
            intfs = {
                net.intf(sw.name, lk.port_of(sw.name))
                for sw in fabric.switches
                for lk in fabric.links_of(sw.name)
            }
            hosts = [h.name for h in fabric.hosts]
            samplers = SamplerProcess(
                scratch / "samplers", ports, config.sampler.rate_hz, link_ports=ports
            )
            with samplers:
                before = {
                    "hosts": tcpcount.host_counters(net, hosts),
                    "switches": tcpcount.fabric_switch_counters(net, intfs),
                }
                with (
                    probe,
                    AgentFleet(net, scratch / "agents", schedule, deployment.scale) as fleet,
                ):
                    flows = fleet.run(timeout_s=seconds * 3 + 10)
                    events = {"t0_ns": fleet.t0_ns, "t_end_ns": time.monotonic_ns()}
                after = {
                    "hosts": tcpcount.host_counters(net, hosts),
                    "switches": tcpcount.fabric_switch_counters(net, intfs),
                }
            cpu = traffic_window(samplers.table("cpu"), events)
            tcp = tcpcount.totals(tcpcount.delta(before["hosts"], after["hosts"]))
            tcp |= tcpcount.unmodelled_places(tcpcount.ledger(before, after))
            rates = deployment.rates_bps
            # capacity is what is being measured: offered_load must not judge it
            judged = verdict(
                flows,
                samplers.table("queues"),
                cpu,
                samplers.rates(),
                rates,
                fabric,
                config.fidelity,
                capacity_mbps=math.inf,
                tcp=tcp,
                mtu=mtu,
            )
    steal = cpu["steal_pct"] if cpu is not None and "steal_pct" in cpu else pd.Series([])
    load = {"busy_core_outside_s": outside_s}
    if len(steal):
        load["steal_pct"] = float(steal.mean())
    return flows, judged, load | stall_load(probe, flows, config.fidelity.lateness_p99_ms)


def stall_load(probe: StallProbe, flows: pd.DataFrame, limit_ms: float) -> dict[str, float]:
    """What ``Step.load`` records of the machine's stalls during a trial (nothing when
    the probe did not run: ``cyclictest`` missing)."""
    if not probe.measured:
        return {}
    spans = [(s.start_ns, s.end_ns) for s in probe.stalls]
    apart = lateness_apart_from_stalls(flows, spans)
    out = {
        "stalls": float(len(spans)),
        "stall_ms_max": max((s.us / 1000 for s in probe.stalls), default=0.0),
        "stalled_flows": float(apart["stalled"] or 0),
        "unstalled_flows": float(apart["kept"] or 0),
        "lateness_limit_ms": float(limit_ms),
    }
    if apart["p99_ms"] is not None:
        out["lateness_p99_unstalled_ms"] = float(apart["p99_ms"])
    return out


def hop_step(
    hops: int,
    planned_mbps: float,
    seconds: float,
    mtu: int = DEFAULT_MTU,
    where: tuple[dict[str, Any], list[tuple[str, str]]] | None = None,
) -> Step:
    """``planned_mbps`` of switch-hop work on paths of ``hops`` switches, judged; on
    ``where`` (a fabric section and its ``fabric_pairs``), else ``INCAST_PAIRS``'."""
    section, pairs = where or INCAST_PAIRS[hops]
    fabric = trial_fabric(make_fabric(section), pairs)
    rate = planned_mbps / (HOST_LINKS_DELIVERED * hops)  # each host link's emulated Mbit/s
    # a fabric whose uplinks a worst-case hash would overfill runs every link faster
    scale = rate * 1e6 * link_factor(fabric, pairs) / (host_gbps(fabric, pairs) * 1e9)
    schedule = hop_schedule(pairs, rate, seconds, scale)
    try:
        egress_plan(fabric, Scale(scale, mtu))
    except FabricError:  # a ceiling of the emulation, not a step that ran: search lower
        peak = peak_hop_mbps(schedule, fabric, scale)
        return Step(f"switch_hop_mbps:{hops}", planned_mbps, peak, None, False, [BEYOND_LINK_RATE])
    flows, judged, load = run_trial(section, schedule, scale, seconds, mtu, fabric)
    carried, _ = offered_switching_mbps(flows, fabric)
    return _step(
        f"switch_hop_mbps:{hops}",
        planned_mbps,
        peak_hop_mbps(schedule, fabric, scale),
        carried,
        judged,
        load,
    )


def message_step(
    cls: str,
    planned_hops_per_s: float,
    seconds: float,
    mtu: int = DEFAULT_MTU,
    section: dict[str, Any] | None = None,
) -> Step:
    """Messages of class ``cls`` at ``planned_hops_per_s`` message-hops/s between random
    hosts of ``section``'s fabric (default: the 3-switch-path one), judged."""
    section = section or INCAST_PAIRS[3][0]
    fabric = make_fabric(section)
    hosts = [h.name for h in fabric.hosts]
    mean_hops = mean_switches(fabric)  # a random pair's switches
    scale = message_scale(fabric)
    schedule = message_schedule(
        hosts, planned_hops_per_s / mean_hops, MESSAGE_BYTES[cls], seconds, scale
    )
    flows, judged, load = run_trial(section, schedule, scale, seconds, mtu)
    peak = peak_message_hops(schedule, fabric, scale, cls)
    return _step(f"messages_per_s:{cls}", planned_hops_per_s, peak, None, judged, load)


def message_scale(fabric: Fabric) -> float:
    """``MESSAGE_SCALE``, or less where the fabric's fastest link (an NVLink switch's)
    would then run above what one emulated hop carries (``shaping.max_rate_bps``)."""
    fastest = max((lk.real_gbps for lk in fabric.links), default=HOST_GBPS)
    return min(MESSAGE_SCALE, max_rate_bps() / (fastest * 1e9))


def mean_switches(fabric: Fabric) -> float:
    """The mean switches on the path of a random ordered pair of distinct hosts."""
    count = switch_counter(fabric)
    names = [h.name for h in fabric.hosts]
    counts = [count(a, b) for a in names for b in names if a != b]
    return sum(counts) / len(counts) if counts else 1.0


def path_lengths(fabric: Fabric) -> list[int]:
    """The switch counts of the fewest-hop paths between the fabric's hosts, sorted."""
    count = switch_counter(fabric)
    names = [h.name for h in fabric.hosts]
    return sorted({count(a, b) for i, a in enumerate(names) for b in names[i + 1 :]} - {0})


def fabric_pairs(fabric: Fabric, hops: int) -> list[tuple[str, str]] | None:
    """Four (sender, receiver) pairs whose paths cross ``hops`` switches, as
    ``INCAST_PAIRS`` has them: two one-to-one streams, then two senders into one
    receiver, no host in two of them; the first such in host order, pairs of two
    servers before pairs inside one (whose one switch is an NVLink switch) (None: the
    fabric has none)."""
    count = switch_counter(fabric)
    names = [h.name for h in fabric.hosts]
    used: set[str] = set()

    def partner(a: str, receivers: Sequence[str], inside: bool) -> str | None:
        for b in receivers:
            fresh = b not in used and b != a
            if fresh and fabric.same_server(a, b) == inside and count(a, b) == hops:
                return b
        return None

    pairs: list[tuple[str, str]] = []
    for inside in (False, True):  # the streams
        for a in names:
            b = None if a in used or len(pairs) == 3 else partner(a, names, inside)
            if b is not None:
                pairs.append((a, b))
                used |= {a, b}
    if len(pairs) < 3:
        return None
    receiver = pairs[2][1]
    used.discard(receiver)
    for inside in (False, True):  # the incast's second sender
        for a in names:
            if a not in used and partner(a, [receiver], inside) is not None:
                return [*pairs, (a, receiver)]
    return None


def link_factor(fabric: Fabric, pairs: Sequence[tuple[str, str]]) -> float:
    """How far the streams of ``pairs`` (the first two at their senders' host rate, the
    incast's two at half) could overfill a link between switches if every stream took
    the same of its equal-cost paths: the largest demand ÷ real rate (≥ 1: the
    calibration's links are then that much faster than its host rate)."""
    shares = (1.0, 1.0, 0.5, 0.5)
    rate = host_gbps(fabric, pairs)
    demand: dict[tuple[str, str], float] = {}
    for pair, share in zip(pairs, shares, strict=False):
        for x, y in crossed_hops(fabric, [pair]):
            if not (fabric.node(x).is_host or fabric.node(y).is_host):
                demand[(x, y)] = demand.get((x, y), 0.0) + share * rate
    over = [v / fabric.link_between(*k).real_gbps for k, v in demand.items()]
    return max([1.0, *over])


def crossed_hops(fabric: Fabric, pairs: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
    """Every hop, in its direction, that a stream of ``pairs`` can cross: those of each
    pair's equal-cost paths."""
    return {hop for a, b in pairs for path in fabric.shortest_paths(a, b) for hop in pairwise(path)}


def host_gbps(fabric: Fabric, pairs: Sequence[tuple[str, str]]) -> float:
    """The real rate of the senders' first hop (the host links the streams fill)."""
    rates = []
    for a, b in pairs:
        path = fabric.shortest_paths(a, b)[0]
        rates.append(fabric.link_between(a, path[1]).real_gbps)
    return min(rates)


def trial_fabric(fabric: Fabric, pairs: Sequence[tuple[str, str]]) -> Fabric:
    """The fabric a switch-hop step builds: ``fabric`` with every link that no stream of
    ``pairs`` can cross (on any of its equal-cost paths) slowed to the fastest crossed
    link's rate where it was faster. Those links carry nothing, so their rate changes
    nothing the step measures; left as they are, a 3.6 Tbit/s NVLink link would ask one
    emulated hop for more than it honours (``shaping.max_rate_bps``) at a load far below
    the machine's switching limit, and the search would stop at that ceiling. Rates are
    not part of ``envelope.fabric_key``: the envelope is still the fabric's."""
    crossed = {frozenset(hop) for hop in crossed_hops(fabric, pairs)}
    used = [lk.real_gbps for lk in fabric.links if frozenset(lk.ends()) in crossed]
    top = max(used, default=HOST_GBPS)
    links = tuple(
        lk if frozenset(lk.ends()) in crossed or lk.real_gbps <= top else replace(lk, real_gbps=top)
        for lk in fabric.links
    )
    return replace(fabric, links=links)


def at_link_ceiling(steps: Sequence[Step]) -> bool:
    """Whether a figure's search was stopped by link rate, not by the verdict: its
    smallest unfaithful step could not be shaped (``BEYOND_LINK_RATE``), so the figure
    is a lower bound on what this machine switches, not its limit."""
    failed = [s for s in steps if not s.faithful]
    return bool(failed) and min(failed, key=lambda s: s.planned).failed == [BEYOND_LINK_RATE]


def sampler_us_per_port(ticks: int = 200) -> float:
    """The queue sampler's cost on the 5-switch-path fabric: µs per port per tick."""
    fabric = make_fabric(INCAST_PAIRS[5][0])
    with FabricNetwork(fabric, Scale(), rules=StaticRules()) as net:
        ports = switch_ports(net)
        seconds = QueueSampler(ports).time_ticks(ticks)
    return seconds / ticks / len(ports) * 1e6


def _step(
    figure: str,
    planned: float,
    peak: float,
    carried: float | None,
    judged: dict[str, Any],
    load: dict[str, float],
) -> Step:
    checks = {k: c["value"] for k, c in judged["checks"].items()}
    ok = bool(judged["ok"])
    return Step(figure, planned, peak, carried, ok, failed_checks(judged), checks, load)


def calibrate(
    quick: bool = False,
    say: Callable[[str], None] = print,
    mtu: int = DEFAULT_MTU,
    fabric_section: dict[str, Any] | None = None,
) -> tuple[Envelope, dict]:
    """Measure every figure at ``mtu``; the envelope and the record of its steps. Raises
    ``CalibrationError`` when a figure has no faithful step. With ``fabric_section`` (a
    spec's ``fabric:``), the switch-hop figures are measured on that fabric, for each
    path length its hosts have (``fabric_pairs``), each search starting from the
    machine's figure, and the message figures between its hosts; the queue sampler's
    cost is not measured. A figure whose search stopped at a link-rate ceiling
    (``at_link_ceiling``) is said to be a lower bound, here and in the envelope's
    source."""
    mode = "quick" if quick else "full"
    seconds = 3.0 if quick else 8.0
    identity = machine_identity("kernel" if ovs_kernel_datapath() else "user", check_mtu(mtu))
    if fabric_section is None:
        start, where, skipped = DEFAULT, INCAST_PAIRS, []
        messages_on = INCAST_PAIRS[3][0]
    else:
        from experiments.orchestration.envelope import load as load_envelope

        start, _ = load_envelope(identity)  # the machine's figures: where each search starts
        where, skipped = fabric_where(fabric_section)
        messages_on = fabric_section
    steps: list[Step] = []
    ceilings: list[str] = []  # figures whose search a link's rate stopped: lower bounds
    t0 = time.monotonic()

    def measured(figure: str, guess: float, run_step: Callable[[float], Step]) -> float:
        value, at_ceiling = _search(figure, guess, run_step, mode, say, steps, t0)
        ceilings.extend([figure] if at_ceiling else [])
        return value

    hop = {}
    for n, (section, pairs) in where.items():
        if fabric_section is not None:
            say(f"switch_hop_mbps:{n}: pairs {', '.join(f'{a}->{b}' for a, b in pairs)}")
        hop[n] = measured(
            f"switch_hop_mbps:{n}",
            start.capacity_mbps(n),
            lambda load, n=n, w=(section, pairs): hop_step(n, load, seconds, mtu, w),
        )
    msgs = {
        c: measured(
            f"messages_per_s:{c}",
            start.messages_per_s[c],
            lambda load, c=c: message_step(c, load, seconds, mtu, messages_on),
        )
        for c in MESSAGE_BYTES
    }
    record: dict[str, Any] = {"mode": mode, "seconds_per_step": seconds}
    if fabric_section is None:
        record["sampler_us_per_port"] = per_port = sampler_us_per_port()
        say(f"queue sampler: {per_port:.2f} µs per port per tick")
    else:
        record["fabric"] = fabric_section
        record["pairs"] = {str(n): pairs for n, (_, pairs) in where.items()}
    env = Envelope(
        switch_hop_mbps=hop,
        messages_per_s=msgs,
        connections=start.connections,
        source=_source(mode, fabric_section, start, skipped, ceilings),
        calibrated=True,
        machine=identity,
    )
    record |= {
        "small_bytes": SMALL_BYTES,
        "link_rate_ceilings": ceilings,
        "wall_s": round(time.monotonic() - t0, 1),
        "steps": [s.__dict__ for s in steps],
    }
    return env, record


def fabric_where(
    section: dict[str, Any],
) -> tuple[dict[int, tuple[dict[str, Any], list[tuple[str, str]]]], list[int]]:
    """Where a fabric's switch-hop figures are measured, as ``INCAST_PAIRS`` has the
    machine's: per path length its hosts have, the section and its ``fabric_pairs``; and
    the path lengths without four such pairs (not measured). Raises
    ``CalibrationError`` when no length has them."""
    fabric = make_fabric(section)
    lengths = {n: fabric_pairs(fabric, n) for n in path_lengths(fabric)}
    where = {n: (section, pairs) for n, pairs in lengths.items() if pairs is not None}
    if not where:
        raise CalibrationError("the fabric has no four host pairs of one path length")
    return where, sorted(set(lengths) - set(where))


def _source(
    mode: str,
    section: dict[str, Any] | None,
    start: Envelope,
    skipped: Sequence[int],
    ceilings: Sequence[str],
) -> str:
    """The stored envelope's ``source``: how and where it was measured, and what not."""
    from experiments.orchestration.envelope import fabric_key

    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    bound = f"; at a link-rate ceiling, lower bounds: {', '.join(ceilings)}" if ceilings else ""
    if section is None:
        return (
            f"kvfabric calibrate ({mode}) on {when}; connections not measured "
            f"(the default's {start.connections})" + bound
        )
    fabric = make_fabric(section)
    return (
        f"kvfabric calibrate --fabric ({mode}) on {when}, on this fabric "
        f"({fabric.kind}, {len(fabric.switches)} switches, key {fabric_key(fabric)})"
        + (f"; paths of {list(skipped)} switches not measured (no four pairs)" if skipped else "")
        + f"; connections: the machine's ({start.connections})"
        + bound
    )


def _search(
    figure: str,
    guess: float,
    run_step: Callable[[float], Step],
    mode: str,
    say: Callable[[str], None],
    steps: list[Step],
    t0: float,
) -> tuple[float, bool]:
    """One figure's search (``search``), each step said: its largest faithful load, and
    whether a link-rate ceiling stopped it (``at_link_ceiling``, said too). Raises
    ``CalibrationError`` when no step was faithful."""

    def logged(load: float) -> Step:
        s = run_step(load)
        judged = "faithful" if s.faithful else "NOT faithful: " + ", ".join(s.failed)
        say(
            f"{figure}: planned {load:,.0f}, peak {s.peak:,.0f} -> {judged} "
            f"({time.monotonic() - t0:.0f} s)"
        )
        return s

    found = search(guess, mode, logged)
    steps.extend(found)
    value = largest_faithful(found)
    if value is None:
        least = min(found, key=lambda s: s.planned)
        cause = refusal_cause(found)
        why = (
            f"explained by measured load: {cause}"
            if cause
            else "NOT explained by measured load (no steal, busy core outside the run"
            " or machine stall at the lowest step): a regression of the emulation, not a"
            " busy machine?"
        )
        raise CalibrationError(
            f"{figure}: not faithful even at {least.planned:,.0f} (failed: "
            f"{', '.join(least.failed)}); {why}",
            found,
            cause,
        )
    at_ceiling = at_link_ceiling(found)
    if at_ceiling:
        say(
            f"{figure}: {value:,.0f} is a ceiling of the emulated links' rate, not of this "
            "machine: the next step up could not be shaped (a lower bound)"
        )
    return value, at_ceiling
