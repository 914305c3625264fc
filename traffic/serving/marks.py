"""The DSCP mark of each kind of serving message, so a QoS design can give the per-token
collective its own class apart from the bulk KV.

A serving workload's ``dscp`` is one mark for every message, or a mapping from message
kind to mark: ``kv_transfer`` (the prompt's KV, monolithic or layer by layer: it marks
``kv_layer`` messages too), ``collective`` (a decode step's all-reduce), ``cache_fetch``
(remote prefix-cache blocks) and ``tier_fetch`` (KV moved to or from a storage node's
flash tier, ``kv_tiers.flash``). A kind the mapping leaves out is unmarked (0).

The marks are what the sending hosts set; the controller's trust boundary keeps a mark
only if it is one of the host's tenant's classes (``controller.qos.tenant_class``).
"""

from __future__ import annotations

from collections.abc import Mapping

from .instances import ServingError

MESSAGE_KINDS = ("kv_transfer", "collective", "cache_fetch", "tier_fetch")
# The kinds of flows.parquet each spec kind marks.
FLOW_KINDS = {
    "kv_transfer": ("kv_transfer", "kv_layer"),
    "collective": ("collective",),
    "cache_fetch": ("cache_fetch",),
    "tier_fetch": ("tier_fetch",),
}
UNMARKED = 0


def _mark(value: object, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 63:
        raise ServingError(f"{key}={value!r} is not allowed: allowed: an integer from 0 to 63")
    return value


def message_dscp(dscp: int | Mapping[str, int], key: str = "dscp") -> dict[str, int]:
    """The DSCP of every flow kind a serving driver sends (``kv_transfer``, ``kv_layer``,
    ``collective``, ``cache_fetch``, ``tier_fetch``) from one mark or a mapping of
    :data:`MESSAGE_KINDS` to marks. ``key`` names the spec key in errors: an unknown
    kind or a mark outside 0..63 raises :class:`ServingError` naming ``key.kind``."""
    if not isinstance(dscp, Mapping):
        mark = _mark(dscp, key)
        return {flow: mark for flows in FLOW_KINDS.values() for flow in flows}
    for kind in dscp:
        if kind not in MESSAGE_KINDS:
            raise ServingError(
                f"{key}.{kind}: unknown message kind {kind!r}: allowed: {', '.join(MESSAGE_KINDS)}"
            )
    out = {}
    for kind, flows in FLOW_KINDS.items():
        mark = _mark(dscp.get(kind, UNMARKED), f"{key}.{kind}")
        out |= dict.fromkeys(flows, mark)
    return out
