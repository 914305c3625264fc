"""DSCP marking at the trust boundary: every switch port facing a host
rewrites ``ip_dscp`` to the class of the host's tenant (or the default class),
in table 0, then continues to table 1. A tenant may be given several classes
(``tenant_class: {serve: [token, kv]}``): a packet its host already marked with
one of them keeps that mark (traffic classes within a tenant), anything else
gets the first. What hosts set beyond their tenant's classes is overwritten.
The egress queues that act on the marks are planned in ``topologies/qos.py``.
"""

from __future__ import annotations

from typing import Any

from topologies import Fabric
from topologies.qos import ClassPlan, QosError, class_plan

from .core import (
    PRIORITY_KEEP,
    PRIORITY_MARK,
    TABLE_CLASSIFY,
    TABLE_PLACE,
    PolicyError,
    check_keys,
    host_ports,
)
from .rules import IPV4, Rule

QOS_KEYS = ("classes", "tenant_class", "default_class")


def parse_qos(
    qos: Any, tenants: dict[str, tuple[str, ...]]
) -> tuple[ClassPlan, dict[str, tuple[str, ...]]]:
    """The class plan and each host's class names (the first is what its
    unmarked traffic gets), checked."""
    if not isinstance(qos, dict):
        raise PolicyError(f"qos={qos!r} is not allowed: must be a mapping with {QOS_KEYS}")
    check_keys("qos", qos, QOS_KEYS)
    try:
        plan = class_plan(qos.get("classes"), qos.get("default_class"))
    except QosError as exc:
        raise PolicyError(str(exc)) from None
    tenant_class = qos.get("tenant_class", {})
    if not isinstance(tenant_class, dict):
        raise PolicyError(f"qos.tenant_class={tenant_class!r} must be {{tenant: class}}")
    host_class = {}
    for tenant, given in tenant_class.items():
        if tenant not in tenants:
            known = ", ".join(tenants) or "none (give params['tenants'])"
            raise PolicyError(f"qos.tenant_class names tenant {tenant!r}: known tenants {known}")
        names = tuple(given) if isinstance(given, list | tuple) else (given,)
        for name in names or (None,):
            if name not in plan.names():
                raise PolicyError(
                    f"qos.tenant_class gives tenant {tenant!r} class {name!r}: "
                    f"allowed {', '.join(plan.names())} (one, or a list)"
                )
        host_class.update(dict.fromkeys(tenants[tenant], names))
    return plan, host_class


def marking_rules(
    fabric: Fabric, tenants: dict[str, tuple[str, ...]], qos: dict[str, Any]
) -> list[Rule]:
    plan, host_class = parse_qos(qos, tenants)
    rules = []
    for sw, port, host in host_ports(fabric):
        first, *kept = host_class.get(host, (plan.default,))
        for name in kept:  # already marked with another class of its tenant: keep it
            match = (("in_port", port), ("eth_type", IPV4), ("ip_dscp", plan.by_name(name).dscp))
            rules.append(
                Rule(sw, PRIORITY_KEEP, match, (("goto_table", TABLE_PLACE),), table=TABLE_CLASSIFY)
            )
        dscp = plan.by_name(first).dscp
        rules.append(
            Rule(
                sw,
                PRIORITY_MARK,
                (("in_port", port), ("eth_type", IPV4)),
                (("set_field", ("ip_dscp", dscp)), ("goto_table", TABLE_PLACE)),
                table=TABLE_CLASSIFY,
            )
        )
    return rules
