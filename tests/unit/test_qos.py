"""QoS by class: DSCP marking at the trust boundary (walked through the rules)
and the per-egress HTB class plan as tc argument lists."""

import json
from types import MappingProxyType

import pytest

from controller.core import TABLE_CLASSIFY, plain_params
from controller.policy import POLICIES, PolicyError, compute
from controller.walk import deliveries
from experiments.spec.config import Qos, QosClass
from topologies import rail_optimized, spine_leaf
from topologies.qos import FLOOR_SHARE, QosError, class_plan

CLASSES = [
    {"name": "token", "dscp": 46, "priority": 0},
    {"name": "kv", "dscp": 26, "rate_share": 0.6, "buffer_pkts": 32},
    {"name": "bulk", "dscp": 0, "rate_share": 0.3},
]
TENANTS = {"serve": ["h0", "h2"], "moe": ["h1", "h3"]}
QOS = {"classes": CLASSES, "tenant_class": {"serve": "token", "moe": "kv"}}


@pytest.mark.parametrize("policy", list(POLICIES))
def test_ingress_leaf_rewrites_dscp_by_tenant(policy):
    # three leaves: valiant and ugal draw an intermediate from a third switch with hosts
    f = spine_leaf(spines=2, leaves=3, hosts_per_leaf=2)
    rules = compute(f, policy, params={"tenants": TENANTS, "qos": QOS})
    expected = {"h0": 46, "h2": 46, "h1": 26, "h3": 26, "h4": 0, "h5": 0}  # h4, h5: default
    for src, dscp in expected.items():
        dst = "h5" if src != "h5" else "h0"
        found = deliveries(f, rules, src, dst, ip_dscp=10, ip_proto=6, tcp_src=1, tcp_dst=2)
        assert found and {d.packet["ip_dscp"] for d in found} == {dscp}, src


def test_marking_rules_sit_at_every_host_port_and_continue_to_routing():
    f = rail_optimized(servers=2, gpus_per_server=2)
    tenants = {"t": ["gpu0_0", "gpu1_1"]}
    qos = {"classes": CLASSES, "tenant_class": {"t": "token"}, "default_class": "kv"}
    rules = compute(f, "ecmp", params={"tenants": tenants, "qos": qos})
    marks = [r for r in rules.rules if r.table == TABLE_CLASSIFY and r.priority > 0]
    host_ports = [
        (lk.other(h.name), lk.port_of(lk.other(h.name)))
        for h in f.hosts
        for lk in f.links_of(h.name)
    ]
    assert sorted((r.switch, r.match_dict()["in_port"]) for r in marks) == sorted(host_ports)
    for r in marks:
        assert r.actions[-1] == ("goto_table", 1)
        assert r.match_dict()["eth_type"] == 0x0800
    # same-server traffic is marked on the NVLink switch too
    [d] = deliveries(f, rules, "gpu1_1", "gpu1_0")
    assert d.path == ["gpu1_1", "nvl1", "gpu1_0"] and d.packet["ip_dscp"] == 46
    [d] = deliveries(f, rules, "gpu1_0", "gpu1_1")
    assert d.packet["ip_dscp"] == 26


def test_a_tenant_with_several_classes_keeps_its_own_marks_only():
    f = spine_leaf(spines=2, leaves=2, hosts_per_leaf=2)
    qos = {"classes": CLASSES, "tenant_class": {"serve": ["kv", "token"], "moe": "bulk"}}
    rules = compute(f, "ecmp", params={"tenants": TENANTS, "qos": qos})

    def mark(src: str, dscp: int) -> set[int]:
        return {d.packet["ip_dscp"] for d in deliveries(f, rules, src, "h3", ip_dscp=dscp)}

    assert mark("h0", 46) == {46}  # serve marked its tokens EF: kept
    assert mark("h0", 26) == {26}  # and its KV transfers AF31: kept
    assert mark("h0", 0) == {26}  # unmarked: the tenant's first class
    assert mark("h0", 10) == {26}  # a DSCP outside its classes: rewritten
    assert mark("h1", 46) == {0}  # moe cannot claim EF


def test_no_qos_leaves_dscp_alone():
    f = spine_leaf(2, 2, 2)
    for d in deliveries(f, compute(f, "ecmp"), "h0", "h3", ip_dscp=10):
        assert d.packet["ip_dscp"] == 10


def test_class_plan_layout_rates_and_filters():
    plan = class_plan(CLASSES)
    assert plan.default == "bulk"
    assert plan.ids() == {"bulk": ("1:1", "10:"), "token": ("1:11", "11:"), "kv": ("1:12", "12:")}
    cmds = plan.commands("s1-eth3", 10_000_000, 64)
    assert cmds[0] == [
        "qdisc",
        "replace",
        "dev",
        "s1-eth3",
        "root",
        "handle",
        "1:",
        "htb",
        "default",
        "1",
    ]
    link = cmds[1]
    assert link[link.index("classid") + 1] == "1:100"
    assert link[link.index("rate") + 1] == link[link.index("ceil") + 1] == "10000000bit"
    classes = {c[c.index("classid") + 1]: c for c in cmds if c[0] == "class"}
    # a strict-priority class exists: every class is assured only the floor and
    # borrows the link in HTB prio order (token first); kv and bulk share 2:1
    floor = f"{round(FLOOR_SHARE * 10_000_000)}bit"
    expected = {
        "1:1": (floor, "1", "1514"),
        "1:11": (floor, "0", "1514"),
        "1:12": (floor, "1", "3028"),
    }
    for classid, (rate, prio, quantum) in expected.items():
        c = classes[classid]
        assert c[c.index("parent") + 1] == "1:100"
        assert c[c.index("rate") + 1] == rate
        assert c[c.index("ceil") + 1] == "10000000bit"
        assert c[c.index("prio") + 1] == prio
        assert c[c.index("quantum") + 1] == quantum
    fifos = {
        c[c.index("parent") + 1]: (c[c.index("handle") + 1], c[-1])
        for c in cmds
        if c[0] == "qdisc" and "pfifo" in c
    }
    assert fifos == {"1:1": ("10:", "64"), "1:11": ("11:", "64"), "1:12": ("12:", "32")}
    filters = {
        c[c.index("flowid") + 1]: c[c.index("tos") + 1 : c.index("tos") + 3]
        for c in cmds
        if c[0] == "filter"
    }
    assert filters == {"1:11": ["0xb8", "0xfc"], "1:12": ["0x68", "0xfc"], "1:1": ["0x00", "0xfc"]}
    assert all(c[c.index("parent") + 1] == "1:" for c in cmds if c[0] == "filter")
    handles = [c[c.index("handle") + 1] for c in cmds if c[0] == "filter"]
    assert len(set(handles)) == len(handles)  # "replace" stays idempotent


def test_class_queues_at_jumbo_mtu_keep_their_bytes_and_quanta_scale_with_the_frame():
    cmds = class_plan(CLASSES).commands("s1-eth3", 10_000_000, 64, mtu=9000)
    quanta = {c[c.index("classid") + 1]: c[c.index("quantum") + 1] for c in cmds if c[0] == "class"}
    assert quanta == {"1:100": "9014", "1:1": "9014", "1:11": "9014", "1:12": "18028"}
    fifos = {c[c.index("parent") + 1]: c[-1] for c in cmds if c[0] == "qdisc" and "pfifo" in c}
    assert fifos == {"1:1": "11", "1:11": "11", "1:12": "5"}  # 64 and 32 frames of 1,514 B


def test_weighted_classes_alone_are_assured_their_share():
    plan = class_plan(
        [
            {"name": "kv", "dscp": 26, "rate_share": 0.6},
            {"name": "bulk", "dscp": 0, "rate_share": 0.3},
        ]
    )
    cmds = plan.commands("s1-eth3", 10_000_000, 64)
    rates = {c[c.index("classid") + 1]: c[c.index("rate") + 1] for c in cmds if c[0] == "class"}
    assert rates == {"1:100": "10000000bit", "1:1": "3000000bit", "1:11": "6000000bit"}


def test_strict_priorities_rank_before_the_weighted_group():
    plan = class_plan(
        [
            {"name": "bulk", "dscp": 0, "rate_share": 0.5},
            {"name": "low", "dscp": 8, "priority": 5},
            {"name": "top", "dscp": 46, "priority": 2},
        ],
        "bulk",
    )
    assert [c.name for c in plan.strict()] == ["top", "low"]
    assert plan.htb_prio() == {"top": 0, "low": 1, "bulk": 2}


def _typed_qos(tenant_class, default_class=None):
    """QOS as the run's configuration holds it: frozen sections, tuples, read-only tables."""
    classes = tuple(
        QosClass(**({"rate_share": None, "priority": None, "buffer_pkts": None} | c))
        for c in CLASSES
    )
    table = MappingProxyType(
        {t: tuple(c) if isinstance(c, list) else c for t, c in tenant_class.items()}
    )
    return Qos(classes, table, default_class)


def test_the_configurations_qos_sections_plan_and_mark_as_their_plain_data_does():
    typed = _typed_qos({"serve": ["kv", "token"], "moe": "bulk"}, "kv")
    assert class_plan(typed.classes, typed.default_class) == class_plan(CLASSES, "kv")
    f = spine_leaf(spines=2, leaves=2, hosts_per_leaf=3)
    plain = {
        "classes": CLASSES,
        "tenant_class": {"serve": ["kv", "token"], "moe": "bulk"},
        "default_class": "kv",
    }
    tenants = MappingProxyType({t: tuple(h) for t, h in TENANTS.items()})
    got = compute(f, "ecmp", params={"tenants": tenants, "qos": typed})
    assert got.rules == compute(f, "ecmp", params={"tenants": TENANTS, "qos": plain}).rules
    # what crosses to the controller process is plain JSON data
    assert json.loads(json.dumps(plain_params({"qos": typed}))) == {
        "qos": plain
        | {
            "classes": [
                {"rate_share": None, "priority": None, "buffer_pkts": None} | c for c in CLASSES
            ]
        }
    }


BAD_CLASSES = [
    ([{"name": "gold", "dscp": 46}], None, "class 'gold' has neither a rate_share nor a priority"),
    ([{"name": "a", "dscp": 64, "priority": 1}], None, "class 'a': dscp=64"),
    ([{"name": "a", "dscp": 1, "rate_share": 1.5}], None, "class 'a': rate_share=1.5"),
    ([{"name": "a", "dscp": 1, "priority": 9}], None, "class 'a': priority=9"),
    ([{"name": "a", "dscp": 1, "priority": 1, "rate": 5}], None, "class 'a': unknown key 'rate'"),
    (
        [{"name": "a", "dscp": 1, "priority": 1}, {"name": "b", "dscp": 1, "priority": 2}],
        None,
        "two classes have dscp 1",
    ),
    (
        [{"name": "a", "dscp": 1, "rate_share": 0.7}, {"name": "b", "dscp": 2, "rate_share": 0.5}],
        None,
        "rate_share values sum to 1.2",
    ),
    (
        [{"name": "a", "dscp": 1, "rate_share": 0.5, "priority": 1}],
        None,
        "class 'a' has both a rate_share",
    ),
    (
        [{"name": "a", "dscp": 1, "priority": 1}, {"name": "b", "dscp": 2, "priority": 1}],
        None,
        "two classes have priority 1",
    ),
    ([{"name": "a", "dscp": 1, "priority": 1}], "b", "default_class='b' is not a class"),
    ([], None, "qos.classes must be a list of 1 to 8"),
]


@pytest.mark.parametrize(("classes", "default", "message"), BAD_CLASSES)
def test_bad_classes_are_named(classes, default, message):
    with pytest.raises(QosError, match=message):
        class_plan(classes, default)


def test_a_tenant_class_list_names_only_known_classes():
    f = spine_leaf(2, 2, 2)
    qos = {"classes": CLASSES, "tenant_class": {"serve": ["kv", "gold"]}}
    with pytest.raises(PolicyError, match="class 'gold': allowed token, kv, bulk"):
        compute(f, "ecmp", params={"tenants": TENANTS, "qos": qos})


def test_bad_tenant_class_is_named():
    f = spine_leaf(2, 2, 2)
    with pytest.raises(PolicyError, match="names tenant 'nobody'"):
        compute(
            f, "ecmp", params={"tenants": TENANTS, "qos": QOS | {"tenant_class": {"nobody": "kv"}}}
        )
    with pytest.raises(PolicyError, match="gives tenant 'moe' class 'gold'"):
        compute(
            f, "ecmp", params={"tenants": TENANTS, "qos": QOS | {"tenant_class": {"moe": "gold"}}}
        )
    with pytest.raises(PolicyError, match="class 'x' has neither"):
        compute(f, "ecmp", params={"qos": {"classes": [{"name": "x", "dscp": 1}]}})
