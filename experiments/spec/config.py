"""The typed, frozen configuration of one run, generated from the spec schema.

Do not edit: ``kvfabric spec types --out experiments/spec/config.py`` writes this file
from the declarations in ``experiments/spec/`` (a unit test fails when it is stale).
``experiments.spec.typed.config_of(resolved)`` builds a ``RunConfig`` from a resolved
spec; code outside the spec room reads ``config.scale.mtu``, never a string key.
Lists are tuples, name -> value tables read-only mappings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from topologies.scale import Scale


@dataclass(frozen=True)
class RunConfig:
    """One run's complete configuration (the whole spec)."""

    # the experiment's name: results go to <out>/<name>/
    name: str
    # seed of every random draw (a run's seed: seed + repeat)
    seed: int
    # how long the traffic runs, s
    duration_s: float
    # the emulation's scale
    scale: Scale
    # the topology: kind and its generator's parameters
    fabric: SpineLeafFabric | FatTreeFabric | RailOptimizedFabric | DragonflyFabric | HyperxFabric
    # several machines emulating the fabric together (default: this one alone)
    cluster: Cluster | None
    # routing policy, tenants and QoS classes
    controller: Controller
    # the processes that send and receive every host's traffic
    agents: Agents
    # TCP's timers in every host, real-equivalent: stretched × scale.time_dilation
    transport: Transport
    # the switch-queue sampler
    sampler: Sampler
    # the verdict's thresholds
    fidelity: Fidelity
    # packet captures into the run's captures/
    capture: Capture
    # link, switch, controller and agent failures at run times
    faults: tuple[Fault, ...]
    # the traffic: each entry's kind picks its parameters
    workloads: tuple[IncastWorkload | KvTransferWorkload | MoeAlltoallWorkload | BackgroundWorkload | ProbeWorkload | ServingWorkload, ...]
    # tenant pairs whose interference the summary measures
    noisy_neighbour: tuple[TenantPair, ...]


@dataclass(frozen=True)
class SpineLeafFabric:
    """Two-tier Clos: every leaf connects to every spine (``fabric[spine_leaf]``)."""

    # Two-tier Clos: every leaf connects to every spine.
    kind: Literal['spine_leaf']
    # spine switches
    spines: int
    # leaf switches
    leaves: int
    # hosts (GPUs) under each leaf
    hosts_per_leaf: int
    # host-to-leaf (or -router) link rate, Gbit/s
    host_gbps: float
    # leaf-to-spine link rate, Gbit/s
    uplink_gbps: float
    # egress buffer of every link, packets
    buffer_pkts: int
    # storage nodes (hosts of the flash KV tier), numbered after the GPUs
    storage_nodes: int
    # where storage nodes attach: a switch kind (spine, leaf, rail, core, router; round robin over
    # its switches) or one switch's name
    storage_attach: str
    # each storage node's link rate, Gbit/s
    storage_gbps: float


@dataclass(frozen=True)
class FatTreeFabric:
    """The k-ary fat-tree: k pods of k/2 edge (leaf) and k/2 aggregation (spine) switches, (k/2)²
    core switches, k³/4 hosts, 5k²/4 switches (``fabric[fat_tree]``).
    """

    # The k-ary fat-tree: k pods of k/2 edge (leaf) and k/2 aggregation (spine) switches, (k/2)²
    # core switches, k³/4 hosts, 5k²/4 switches.
    kind: Literal['fat_tree']
    # switch radix: k pods, k³/4 hosts (even, 2 to 16)
    k: int
    # host-to-leaf (or -router) link rate, Gbit/s
    host_gbps: float
    # switch-to-switch link rate, Gbit/s
    fabric_gbps: float
    # egress buffer of every link, packets
    buffer_pkts: int
    # storage nodes (hosts of the flash KV tier), numbered after the GPUs
    storage_nodes: int
    # where storage nodes attach: a switch kind (spine, leaf, rail, core, router; round robin over
    # its switches) or one switch's name
    storage_attach: str
    # each storage node's link rate, Gbit/s
    storage_gbps: float


@dataclass(frozen=True)
class RailOptimizedFabric:
    """GPU i of every server connects to rail switch i; every rail switch connects to every spine;
    a server's GPUs share its NVLink switch, so traffic between two GPUs of one server never
    touches the network (``fabric[rail_optimized]``).
    """

    # GPU i of every server connects to rail switch i; every rail switch connects to every spine; a
    # server's GPUs share its NVLink switch, so traffic between two GPUs of one server never touches
    # the network.
    kind: Literal['rail_optimized']
    # GPU servers
    servers: int
    # GPUs per server, one rail switch per GPU index
    gpus_per_server: int
    # spine switches
    spines: int
    # GPU-to-rail link rate, Gbit/s
    rail_gbps: float
    # rail-to-spine link rate, Gbit/s
    spine_gbps: float
    # GPU-to-NVLink-switch rate inside a server, Gbit/s
    nvlink_gbps: float
    # egress buffer of every link, packets
    buffer_pkts: int
    # storage nodes (hosts of the flash KV tier), numbered after the GPUs
    storage_nodes: int
    # where storage nodes attach: a switch kind (spine, leaf, rail, core, router; round robin over
    # its switches) or one switch's name
    storage_attach: str
    # each storage node's link rate, Gbit/s
    storage_gbps: float


@dataclass(frozen=True)
class DragonflyFabric:
    """Dragonfly: groups of a routers joined all-to-all, p hosts and h global links per router
    (balanced a = 2p = 2h); groups 0 means the largest, a·h + 1 (``fabric[dragonfly]``).
    """

    # Dragonfly: groups of a routers joined all-to-all, p hosts and h global links per router
    # (balanced a = 2p = 2h); groups 0 means the largest, a·h + 1.
    kind: Literal['dragonfly']
    # hosts (GPUs) per router
    p: int
    # routers per group, joined all-to-all by local links
    a: int
    # global links per router
    h: int
    # groups; 0: the largest, a·h + 1 (one global link between every two groups); a·h must divide
    # equally among the other groups
    groups: int
    # which group each global port leads to: consecutive or palmtree
    arrangement: str
    # host-to-leaf (or -router) link rate, Gbit/s
    host_gbps: float
    # router-to-router link rate inside a group, Gbit/s
    local_gbps: float
    # router-to-router link rate between groups, Gbit/s
    global_gbps: float
    # egress buffer of every link, packets
    buffer_pkts: int
    # storage nodes (hosts of the flash KV tier), numbered after the GPUs
    storage_nodes: int
    # where storage nodes attach: a switch kind (spine, leaf, rail, core, router; round robin over
    # its switches) or one switch's name
    storage_attach: str
    # each storage node's link rate, Gbit/s
    storage_gbps: float


@dataclass(frozen=True)
class HyperxFabric:
    """HyperX: routers on a lattice of the given shape, all-to-all along each dimension, k hosts
    per router (diameter: one hop per dimension) (``fabric[hyperx]``).
    """

    # HyperX: routers on a lattice of the given shape, all-to-all along each dimension, k hosts per
    # router (diameter: one hop per dimension).
    kind: Literal['hyperx']
    # routers per dimension: [S1, ..., SL], 1 to 4 dimensions of 2 to 64
    shape: tuple[int, ...]
    # hosts (GPUs) per router
    k: int
    # host-to-leaf (or -router) link rate, Gbit/s
    host_gbps: float
    # router-to-router link rate, Gbit/s
    router_gbps: float
    # egress buffer of every link, packets
    buffer_pkts: int
    # storage nodes (hosts of the flash KV tier), numbered after the GPUs
    storage_nodes: int
    # where storage nodes attach: a switch kind (spine, leaf, rail, core, router; round robin over
    # its switches) or one switch's name
    storage_attach: str
    # each storage node's link rate, Gbit/s
    storage_gbps: float


@dataclass(frozen=True)
class Cluster:
    """``cluster``."""

    # the machines that emulate the fabric together: user@host or {host, user} (localhost is this
    # machine; --cluster sets them)
    servers: tuple[str | ServerAddress, ...]
    # N > 0 instead of servers: the run brings up a local cluster of N server namespaces on this
    # machine and removes it after (kvfabric cluster local)
    local: int | None
    # auto (each GPU server's NVLink domain whole, balanced by each server's envelope) or host ->
    # its nodes: every node once, no NVLink domain split
    placement: Literal['auto'] | Mapping[str, tuple[str, ...]]
    # what carries a link cut between servers
    link: Literal['vxlan', 'ssh']
    # ssh -F file to reach the servers (relative to the spec)
    ssh_config: str | None


@dataclass(frozen=True)
class ServerAddress:
    """``cluster.servers[]``."""

    # its name or address
    host: str
    # who ssh logs in as
    user: str


@dataclass(frozen=True)
class Controller:
    """routing policy, tenants and QoS classes (``controller``)."""

    # the routing policy the controller installs
    policy: Literal['shortest_path', 'ecmp', 'adaptive', 'tenant_paths', 'minimal', 'valiant', 'ugal']
    # OpenFlow over TLS only, with a CA made for the run and removed with it (what switches on other
    # machines use)
    tls: bool
    # tenant -> its hosts (tenant_paths, QoS classes, noisy_neighbour)
    tenants: Mapping[str, tuple[str, ...]]
    # tenant -> the spines its traffic may cross (policy tenant_paths)
    spines: Mapping[str, tuple[str, ...]]
    # egress classes (HTB shares or strict priority) and which tenant gets which
    qos: Qos


@dataclass(frozen=True)
class Qos:
    """egress classes (HTB shares or strict priority) and which tenant gets which
    (``controller.qos``).
    """

    # the egress classes, each a queue under HTB
    classes: tuple[QosClass, ...]
    # tenant -> a class, or a list whose marks the tenant's packets keep
    tenant_class: Mapping[str, str | tuple[str, ...]]
    # the class of unmarked traffic (default: the last)
    default_class: str | None


@dataclass(frozen=True)
class QosClass:
    """``controller.qos.classes[]``."""

    # the class's name (tenant_class, default_class)
    name: str
    # the DSCP mark that puts a packet in this class
    dscp: int
    # the share of each egress this class is assured (weighted)
    rate_share: float | None
    # strict priority instead of a share: 0 is served first
    priority: int | None
    # this class's queue limit, packets (default: the link's buffer)
    buffer_pkts: int | None


@dataclass(frozen=True)
class Agents:
    """the processes that send and receive every host's traffic (``agents``)."""

    # the hosts' TCP congestion control (transport.congestion is another name for it)
    cc: Literal['cubic', 'reno', 'bbr']
    # one TCP connection per host pair, or one per flow
    connection: Literal['persistent', 'per_flow']
    # agent worker processes: one per CPU (auto), one per host, or N
    processes: Literal['auto', 'per_host'] | int
    # seconds between saves of the finished flows, requests and tokens to the run folder while it
    # runs (a killed run keeps them)
    flush_s: float


@dataclass(frozen=True)
class Transport:
    """TCP's timers in every host, real-equivalent: stretched × scale.time_dilation
    (``transport``).
    """

    # the hosts' TCP congestion control, another name for agents.cc: set either (both only to the
    # same value); null: agents.cc decides; the resolved spec holds the one in use in both
    congestion: Literal['cubic', 'reno', 'bbr'] | None
    # TCP's minimum retransmission timeout, real-equivalent ms: every host route gets rto_min of
    # this × scale.time_dilation wall ms (at most 120 s); null: the kernel's 200 ms of wall time,
    # which does not dilate
    rto_min_ms: float | None
    # the kernel's delayed ACKs (40–200 ms of wall time, which do not dilate); false: quickack on
    # every host route, an ACK per segment
    delayed_ack: bool
    # the kernel's tail-loss probe (its timer has wall-time floors, so at a time dilation it probes
    # sooner in real-equivalent time); false: net.ipv4.tcp_early_retrans=0 in every host
    tail_loss_probe: bool


@dataclass(frozen=True)
class Sampler:
    """the switch-queue sampler (``sampler``)."""

    # queue samples per second per shaped egress
    rate_hz: float
    # seconds between saves of the samples to the run folder while it runs (a killed run keeps them)
    flush_s: float


@dataclass(frozen=True)
class Fidelity:
    """the verdict's thresholds (``fidelity``)."""

    # the agents' issue lateness p99 a faithful run keeps
    lateness_p99_ms: float
    # machine CPU p95 a faithful run stays under, %
    cpu_max_pct: float
    # how far a busy egress may dequeue above or below its configured rate
    dequeue_rate_tolerance: float


@dataclass(frozen=True)
class Capture:
    """packet captures into the run's captures/ (``capture``)."""

    # hosts or switch ports to tcpdump (gpu0_0, leaf0:3, leaf0:spine1)
    at: tuple[str, ...]
    # bytes kept of each packet
    snaplen: int
    # size limit of each capture, MB
    max_mb: float
    # [from, to] s of traffic to capture (default: all)
    window_s: tuple[float, ...] | None


@dataclass(frozen=True)
class Fault:
    """``faults[]``."""

    # when, in s after the traffic starts
    at_s: float
    # the two nodes whose link goes down
    link_down: tuple[str, ...] | None = None
    # the two nodes whose link comes back up
    link_up: tuple[str, ...] | None = None
    # a switch that loses power: every link of it goes down
    switch_down: str | None = None
    # a switch that comes back: its links up
    switch_up: str | None = None
    # {link, period_ms, count}: a link down and up count times
    link_flap: LinkFlap | None = None
    # {link, gbps}: the link's rate changes, as a port falling back to a lower speed
    link_degrade: LinkDegrade | None = None
    # true: the controller process is killed (switches keep flows)
    controller_down: bool = False
    # true: the controller starts again and resynchronises
    controller_up: bool = False
    # a host whose agent dies mid-run
    agent_kill: str | None = None
    # link faults: the controller hears of it this much later (loss-of-signal, BFD), ms
    detect_ms: float = 0.0


@dataclass(frozen=True)
class LinkFlap:
    """``faults[].link_flap``."""

    # the two nodes whose link flaps
    link: tuple[str, ...]
    # one cycle: down for half of it, then up, ms
    period_ms: float
    # how many cycles
    count: int


@dataclass(frozen=True)
class LinkDegrade:
    """``faults[].link_degrade``."""

    # the two nodes whose link changes rate
    link: tuple[str, ...]
    # its new real-equivalent rate, Gbit/s (both ways)
    gbps: float


@dataclass(frozen=True)
class IncastWorkload:
    """The incast schedule: ``rounds`` × N rows of kind ``incast`` (``workloads[][incast]``)."""

    # The incast schedule: ``rounds`` × N rows of kind ``incast``.
    kind: Literal['incast']
    # the host that aggregates
    receiver: str
    # the answering hosts, or how many of `hosts` (other than the receiver) to pick at random with
    # `seed`; they are then kept in `hosts` order
    senders: int | tuple[str, ...]
    # real-equivalent bytes each sender returns per round
    sru_bytes: int
    # number of barrier-separated rounds (>= 1)
    rounds: int
    # delay of round 0 after the run start (default 0)
    start_ms: float
    # each SRU waits uniform [0, jitter_us) µs after its round's release, modelling server response
    # time (default 0: all senders answer at the same instant, the worst case)
    jitter_us: float
    # labels copied to every row
    tenant: str
    # labels copied to every row
    dscp: int
    # the persistent connection (of each sender to the receiver, with this DSCP) the rows ride;
    # workloads in different lanes stream side by side, as queue pairs do (default 0: one connection
    # per pair and DSCP)
    lane: int


@dataclass(frozen=True)
class KvTransferWorkload:
    """The KV transfers of one request per entry of ``tokens`` (``workloads[][kv_transfer]``)."""

    # The KV transfers of one request per entry of ``tokens``.
    kind: Literal['kv_transfer']
    # GPUs of the prefill and decode instances, `*_tp` consecutive hosts per instance (rank order)
    prefill_hosts: tuple[str, ...]
    # GPUs of the prefill and decode instances, `*_tp` consecutive hosts per instance (rank order)
    decode_hosts: tuple[str, ...]
    # model preset name (`traffic.presets.MODELS`)
    model: Literal['llama-3-8b', 'llama-3-70b', 'llama-3-405b', 'llama-3.1-8b', 'llama-3.1-70b', 'mixtral-8x7b', 'llama-2-7b', 'llama-2-70b', 'codellama-34b', 'qwen-72b', 'qwen2.5-14b-1m', 'internlm-20b', 'phi-2']
    # prompt tokens per request (an int is one request)
    tokens: int | tuple[int, ...]
    # `monolithic` (default) or `layer_pipelined`
    mode: Literal['monolithic', 'layer_pipelined']
    # KV-cache element type, `fp16` (default) or `int8` (also `bf16`, `fp8`, `fp32`)
    dtype: Literal['fp32', 'fp16', 'bf16', 'fp8', 'int8']
    # tensor-parallel degree; default: the whole host list is one instance
    prefill_tp: int | None
    # tensor-parallel degree; default: the whole host list is one instance
    decode_tp: int | None
    # GPU preset for the prefill time (default `h100`)
    gpu: Literal['a100', 'h100', 'h200']
    # fraction of peak of the analytic compute terms (default 0.5)
    efficiency: float
    # Poisson request arrivals at this mean rate (seeded); default `None`: all requests arrive at
    # the start and queue
    rate_rps: float | None
    # arrival time of the first request (rate_rps None) or of the arrival process's origin
    start_ms: float
    # the tenant its flows belong to (controller.tenants, noisy_neighbour)
    tenant: str
    # the DSCP mark of its packets (controller.qos.classes pick their class by it)
    dscp: int


@dataclass(frozen=True)
class MoeAlltoallWorkload:
    """``steps`` × 2 × G × (G - 1) rows of kind ``alltoall`` (fewer if a share is 0 bytes)
    (``workloads[][moe_alltoall]``).
    """

    # ``steps`` × 2 × G × (G - 1) rows of kind ``alltoall`` (fewer if a share is 0 bytes).
    kind: Literal['moe_alltoall']
    # the G >= 2 hosts of the expert-parallel group
    group: tuple[str, ...]
    # the tenant the group belongs to
    tenant: str
    # number of dispatch + combine steps
    steps: int
    # tokens each member routes per step
    tokens_per_step: int
    # an MoE preset for `hidden_size` and `top_k` (default `mixtral-8x7b`); `hidden_size`/`top_k`
    # override it, and with both given `model` may be `None`
    model: Literal['llama-3-8b', 'llama-3-70b', 'llama-3-405b', 'llama-3.1-8b', 'llama-3.1-70b', 'mixtral-8x7b', 'llama-2-7b', 'llama-2-70b', 'codellama-34b', 'qwen-72b', 'qwen2.5-14b-1m', 'internlm-20b', 'phi-2'] | None
    # the token's hidden size and experts per token, overriding the preset's
    hidden_size: int | None
    # the token's hidden size and experts per token, overriding the preset's
    top_k: int | None
    # activation element type (default `bf16`; `fp8` halves)
    dtype: Literal['fp32', 'fp16', 'bf16', 'fp8', 'int8']
    # time between step starts (default 10 ms)
    step_interval_ms: float
    # expert compute between dispatch arrival and combine (default 0)
    expert_compute_us: float
    # `uniform` (default; the formula above, deterministic) or `random` (each token-expert
    # assignment picks a member at random, seeded: load imbalance between members)
    routing: Literal['uniform', 'random']
    # when the workload starts, in ms after the run starts
    start_ms: float
    # the DSCP mark of its packets (controller.qos.classes pick their class by it)
    dscp: int


@dataclass(frozen=True)
class BackgroundWorkload:
    """Background flows of kind ``background`` over ``duration_s``, sorted by start
    (``workloads[][background]``).
    """

    # Background flows of kind ``background`` over ``duration_s``, sorted by start.
    kind: Literal['background']
    # hosts that send and receive (default: every host of the fabric)
    hosts: tuple[str, ...]
    # offered load as a fraction of each host's link rate, in (0, 1]
    load: float
    # the real host link rate, Gbit/s (default: the fabric's)
    host_gbps: float
    # arrivals fall in [start, start + duration_s) (default: the run's)
    duration_s: float
    # `web_search` (default) or `data_mining`
    distribution: Literal['web_search', 'data_mining']
    # when the workload starts, in ms after the run starts
    start_ms: float
    # the tenant its flows belong to (controller.tenants, noisy_neighbour)
    tenant: str
    # the DSCP mark of its packets (controller.qos.classes pick their class by it)
    dscp: int
    # k >= 1: flow sizes × k, arrivals ÷ k (load and size shape kept, k times fewer flows); auto:
    # the smallest k that fits this machine's envelope
    flow_size_scale: Literal['auto'] | float


@dataclass(frozen=True)
class ProbeWorkload:
    """``floor(duration_s × rate_hz)`` probes per (src, dst) pair, kind ``probe``
    (``workloads[][probe]``).
    """

    # ``floor(duration_s × rate_hz)`` probes per (src, dst) pair, kind ``probe``.
    kind: Literal['probe']
    # (src, dst) host pairs to measure; src != dst
    pairs: tuple[tuple[str, ...], ...]
    # probes per second per pair; probe k leaves at `start_ms + k / rate_hz` (all pairs in step, no
    # randomness)
    rate_hz: float
    # UDP payload, from the header size (44) to 1472 so a probe is one packet
    size_bytes: int
    # how long to probe
    duration_s: float
    # when the workload starts, in ms after the run starts
    start_ms: float
    # the tenant its flows belong to (controller.tenants, noisy_neighbour)
    tenant: str
    # the DSCP mark of its packets (controller.qos.classes pick their class by it)
    dscp: int


@dataclass(frozen=True)
class ServingWorkload:
    """LLM serving: requests routed to GPU instances (``workloads[][serving]``)."""

    # LLM serving: requests routed to GPU instances
    kind: Literal['serving']
    # the model preset (kvfabric calc kv --model)
    model: Literal['llama-3-8b', 'llama-3-70b', 'llama-3-405b', 'llama-3.1-8b', 'llama-3.1-70b', 'mixtral-8x7b', 'llama-2-7b', 'llama-2-70b', 'codellama-34b', 'qwen-72b', 'qwen2.5-14b-1m', 'internlm-20b', 'phi-2']
    # the GPU preset of every instance
    gpu: Literal['a100', 'h100', 'h200']
    # prefill and decode on separate pools (KV crosses the fabric), or colocated
    mode: Literal['disaggregated', 'colocated']
    # the prefill pool
    prefill: Pool
    # the decode pool (disaggregated mode)
    decode: Pool | None
    # how a request picks its instances
    router: Literal['round_robin', 'least_loaded', 'kv_affinity', 'topology_aware']
    # kv_affinity: the weight of a cache hit against load
    router_weight: float
    # topology_aware: a tier (NVLink, rail, spine) is preferred while a prefill instance's KV in
    # flight over it takes at most this long at the tier's rate, ms
    topology_budget_ms: float
    # KV sent after prefill, or layer by layer as prefill runs
    transfer: Literal['monolithic', 'layer_pipelined']
    # the KV cache's element type
    kv_dtype: Literal['fp16', 'int8']
    # the prefix cache (Mooncake-style pool, or one cache per server)
    prefix_cache: PrefixCache
    # tiered KV storage: HBM per GPU, optional CXL and flash tiers (null: HBM only, no eviction)
    kv_tiers: KvTiers | None
    # a trace {trace, format, ...}, {synthetic: {...}} or {sessions: {...}}
    arrivals: TraceArrivals | SyntheticArrivals | SessionsArrivals
    # the targets SLO attainment and goodput are judged by
    slo: Slo
    # the tenant its flows belong to
    tenant: str
    # its packets' DSCP: one, or per message kind (a mark its tenant's QoS classes keep)
    dscp: int | str | ServingDscp


@dataclass(frozen=True)
class Pool:
    """the prefill pool (``workloads[][serving].prefill``)."""

    # the servers of this pool
    servers: tuple[int, ...]
    # GPU indices within each of its servers, or {server: indices} (default: all of a server's)
    gpus: tuple[int, ...] | Mapping[str, tuple[int, ...]]
    # GPUs per instance (tensor-parallel degree; default: the pool's GPUs of a server)
    tp: int


@dataclass(frozen=True)
class PrefixCache:
    """the prefix cache (Mooncake-style pool, or one cache per server)
    (``workloads[][serving].prefix_cache``).
    """

    # a prefix cache on the prefill servers
    enabled: bool
    # its capacity, KV blocks
    capacity_blocks: int
    # true: one pool, a block held on another prefill server is fetched over the fabric (Mooncake);
    # false: each server's cache on its own
    shared: bool


@dataclass(frozen=True)
class KvTiers:
    """``workloads[][serving].kv_tiers``."""

    # the HBM each GPU gives the KV cache, GB: decode admission and eviction follow it
    hbm_gb: float
    # a host-local CXL tier (no fabric link, costs time)
    cxl: Cxl | None
    # a flash tier on fabric.storage_nodes (tier_fetch messages)
    flash: Flash | None


@dataclass(frozen=True)
class Cxl:
    """``workloads[][serving].kv_tiers.cxl``."""

    # the CXL pool of each server, GB
    capacity_gb: float
    # its bandwidth per server, Gbit/s (a server's moves queue)
    gbps: float
    # added to every move to or from it, µs
    latency_us: float


@dataclass(frozen=True)
class Flash:
    """``workloads[][serving].kv_tiers.flash``."""

    # the flash of each storage node, GB
    capacity_gb: float
    # from asking a storage node for KV to its first byte, µs
    latency_us: float


@dataclass(frozen=True)
class TraceArrivals:
    """a trace {trace, format, ...}, {synthetic: {...}} or {sessions: {...}}
    (``workloads[][serving].arrivals(trace)``).
    """

    # the trace file, relative to the spec's folder
    trace: Any
    # the trace's format
    format: Literal['mooncake', 'azure', 'burstgpt']
    # at most this many requests
    limit: int | None
    # arrival times ÷ speedup (2: twice the request rate)
    speedup: float
    # skip the trace's first start_s seconds
    start_s: float
    # take this many seconds of the trace from start_s
    window_s: float | None
    # token counts × token_scale
    token_scale: float


@dataclass(frozen=True)
class SyntheticArrivals:
    """a trace {trace, format, ...}, {synthetic: {...}} or {sessions: {...}}
    (``workloads[][serving].arrivals(synthetic)``).
    """

    # generated arrivals
    synthetic: Synthetic


@dataclass(frozen=True)
class Synthetic:
    """generated arrivals (``workloads[][serving].arrivals(synthetic).synthetic``)."""

    # how many requests (default: as many as arrive in duration_s)
    n: int | None
    # arrivals stop after this long (default: the run's duration_s, without n)
    duration_s: float | None
    # mean request arrivals per second
    rate_per_s: float
    # poisson; bursty: Poisson at rate_per_s in on_s windows, off_s apart; peaky: a heavy-tailed
    # modulated Poisson whose busiest second of every window_s holds peak_second_share of its
    # requests
    pattern: Literal['poisson', 'bursty', 'peaky']
    # bursty: how long each burst lasts, s
    on_s: float
    # bursty: the silence between bursts, s
    off_s: float
    # prompt tokens: a count or {dist, ...}
    input_tokens: int | Distribution
    # generated tokens: a count or {dist, ...}
    output_tokens: int | Distribution
    # KV blocks of a prefix shared by the requests of one prefix group
    shared_prefix_blocks: int
    # how many distinct shared prefixes the requests draw from
    n_prefixes: int
    # peaky: the share of a window's requests its busiest second absorbs
    peak_second_share: float
    # peaky: the window the share is of, s (default: the arrivals' span)
    window_s: float | None


@dataclass(frozen=True)
class Distribution:
    """``workloads[][serving].arrivals(synthetic).synthetic.input_tokens``."""

    # the distribution of token counts
    dist: Literal['fixed', 'uniform', 'lognormal'] = 'fixed'
    # fixed: the count
    value: int | None = None
    # uniform: the smallest count
    low: int | None = None
    # uniform: the largest count
    high: int | None = None
    # lognormal: the mean count
    mean: float | None = None
    # lognormal: sigma of the log
    sigma: float | None = None


@dataclass(frozen=True)
class SessionsArrivals:
    """a trace {trace, format, ...}, {synthetic: {...}} or {sessions: {...}}
    (``workloads[][serving].arrivals(sessions)``).
    """

    # agentic sessions: chains of turns, each released when the previous ends
    sessions: Sessions


@dataclass(frozen=True)
class Sessions:
    """agentic sessions: chains of turns, each released when the previous ends
    (``workloads[][serving].arrivals(sessions).sessions``).
    """

    # how many sessions
    n: int
    # mean session starts per second (Poisson)
    rate_per_s: float
    # turns per session: a count or {dist, ...}
    turns: int | Distribution
    # the first turn's prompt tokens: a count or {dist, ...}
    context_tokens: int | Distribution
    # tokens each later turn adds to the context (tool result, next message)
    growth_tokens: int | Distribution
    # generated tokens per turn: a count or {dist, ...}
    output_tokens: int | Distribution
    # a turn arrives this long after the previous turn's last token, ms
    tool_ms: float | int | Distribution


@dataclass(frozen=True)
class Slo:
    """the targets SLO attainment and goodput are judged by (``workloads[][serving].slo``)."""

    # time-to-first-token target, ms
    ttft_ms: float
    # time-per-output-token target, ms
    tpot_ms: float


@dataclass(frozen=True)
class ServingDscp:
    """``workloads[][serving].dscp``."""

    # the prompt's KV, monolithic or per layer (kv_transfer, kv_layer flows): a DSCP, or a class
    # name (its DSCP)
    kv_transfer: int | str
    # a decode step's tensor-parallel all-reduce, every token: a DSCP, or a class name (its DSCP)
    collective: int | str
    # prefix-cache blocks fetched from another prefill server: a DSCP, or a class name (its DSCP)
    cache_fetch: int | str
    # KV moved to or from a storage node's flash tier (kv_tiers.flash): a DSCP, or a class name (its
    # DSCP)
    tier_fetch: int | str


@dataclass(frozen=True)
class TenantPair:
    """``noisy_neighbour[]``."""

    # the tenant whose latency is judged
    victim: str
    # the tenant whose traffic may slow it
    aggressor: str


SECTIONS = (
    RunConfig,
    SpineLeafFabric,
    FatTreeFabric,
    RailOptimizedFabric,
    DragonflyFabric,
    HyperxFabric,
    Cluster,
    ServerAddress,
    Controller,
    Qos,
    QosClass,
    Agents,
    Transport,
    Sampler,
    Fidelity,
    Capture,
    Fault,
    LinkFlap,
    LinkDegrade,
    IncastWorkload,
    KvTransferWorkload,
    MoeAlltoallWorkload,
    BackgroundWorkload,
    ProbeWorkload,
    ServingWorkload,
    Pool,
    PrefixCache,
    KvTiers,
    Cxl,
    Flash,
    TraceArrivals,
    SyntheticArrivals,
    Synthetic,
    Distribution,
    SessionsArrivals,
    Sessions,
    Slo,
    ServingDscp,
    TenantPair,
)
# sections whose resolved form leaves out keys at their default (null, false, 0)
SPARSE = (
    Fault,
    Distribution,
)
