"""Barrier-synchronised incast: many senders answer one receiver, round after round.

The classic partition/aggregate pattern (Vasudevan et al., "Safe and Effective
Fine-grained TCP Retransmissions for Datacenter Communication", SIGCOMM 2009):
the receiver asks N servers for one server request unit (SRU) each and asks
again only when the last SRU of the round has arrived, so one slow (timed-out)
sender stalls the whole round.

Each round is one completion group (see ``schedule``): round 0 is released at
the run start (after ``start_ms``), round r + 1 when every SRU of round r has
been received.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from .schedule import WorkloadError, build_schedule, check_hosts, check_positive, ms_to_ns, rng_from


def incast(
    receiver: str,
    senders: Sequence[str] | int,
    sru_bytes: int,
    rounds: int,
    *,
    hosts: Sequence[str] | None = None,
    seed: int | np.random.Generator = 0,
    start_ms: float = 0.0,
    jitter_us: float = 0.0,
    tenant: str = "default",
    dscp: int = 0,
    lane: int = 0,
    first_flow_id: int = 0,
) -> pd.DataFrame:
    """The incast schedule: ``rounds`` × N rows of kind ``incast``.

    - ``receiver``: the host that aggregates.
    - ``senders``: the answering hosts, or how many of ``hosts`` (other than the
      receiver) to pick at random with ``seed``; they are then kept in
      ``hosts`` order.
    - ``sru_bytes``: real-equivalent bytes each sender returns per round.
    - ``rounds``: number of barrier-separated rounds (>= 1).
    - ``hosts``: the fabric's hosts; required when ``senders`` is a count,
      otherwise used to reject unknown names.
    - ``seed``: seed or ``numpy.random.Generator`` (sender choice and jitter).
    - ``start_ms``: delay of round 0 after the run start (default 0).
    - ``jitter_us``: each SRU waits uniform [0, jitter_us) µs after its
      round's release, modelling server response time (default 0: all
      senders answer at the same instant, the worst case).
    - ``tenant``, ``dscp``: labels copied to every row.
    - ``lane``: the persistent connection (of each sender to the receiver, with this
      DSCP) the rows ride; workloads in different lanes stream side by side, as
      queue pairs do (default 0: one connection per pair and DSCP).
    - ``first_flow_id``: flow id of the first row.
    """
    rng = rng_from(seed)
    check_positive("sru_bytes", sru_bytes, integer=True)
    check_positive("rounds", rounds, integer=True)
    if lane < 0:
        raise WorkloadError(f"lane must be >= 0, got {lane}")
    if jitter_us < 0 or start_ms < 0:
        raise WorkloadError(f"jitter_us and start_ms must be >= 0, got {jitter_us}, {start_ms}")
    if isinstance(senders, (int, np.integer)) and not isinstance(senders, bool):
        check_positive("senders", senders, integer=True)
        if hosts is None:
            raise WorkloadError("senders is a count, so hosts (the fabric's hosts) is required")
        if receiver not in hosts:
            raise WorkloadError(f"receiver {receiver!r} is not a fabric host; hosts: {list(hosts)}")
        candidates = [h for h in hosts if h != receiver]
        if senders > len(candidates):
            raise WorkloadError(
                f"senders={senders} but only {len(candidates)} hosts other than the receiver "
                f"exist; allowed: 1..{len(candidates)}"
            )
        picked = set(rng.choice(len(candidates), size=senders, replace=False).tolist())
        sender_list = [h for i, h in enumerate(candidates) if i in picked]
    else:
        sender_list = list(senders)
        if not sender_list:
            raise WorkloadError("senders is empty; give at least one sender")
        check_hosts("senders", sender_list, hosts)
        check_hosts("receiver", [receiver], hosts)
        if receiver in sender_list:
            raise WorkloadError(f"receiver {receiver!r} is also a sender; senders: {sender_list}")
    n = len(sender_list)
    rows = np.arange(rounds * n)
    round_of = rows // n
    first_of_round = round_of * n  # row index of each round's first row = its group
    offset = np.where(round_of == 0, ms_to_ns(start_ms), 0)
    jitter = (rng.random(len(rows)) * jitter_us * 1e3).astype(np.int64) if jitter_us else 0
    return build_schedule(
        {
            "kind": ["incast"] * len(rows),
            "tenant": [tenant] * len(rows),
            "src": sender_list * rounds,
            "dst": [receiver] * len(rows),
            "bytes": np.full(len(rows), sru_bytes),
            "t_sched_ns": offset + jitter,
            "round": round_of,
            "dscp": np.full(len(rows), dscp),
            "lane": np.full(len(rows), lane),
            "barrier": first_of_round,
            "after": np.where(round_of == 0, -1, first_of_round - n),
        },
        first_flow_id,
    )
