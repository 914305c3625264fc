"""The ``cluster:`` section and ``--cluster``: servers, placement (auto or given), the
link between servers; what ``run --dry-run`` shows of it, and that a real multi-server
run stops before building anything (no root: nothing here builds a fabric)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from experiments.cli.main import EXIT_FAILED, EXIT_OK, EXIT_USAGE, main
from experiments.orchestration.cluster import EngineUnavailable, cluster_placement, require_engine
from experiments.orchestration.envelope import DEFAULT
from experiments.spec.cluster import cluster_override, servers_of
from experiments.spec.load import SpecError, expand, load_spec, resolved_yaml
from topologies.placement import server_domains
from topologies.scale import Scale

LEAVES = {
    "name": "two-leaves",
    "duration_s": 2,
    "fabric": {"kind": "spine_leaf", "spines": 2, "leaves": 2, "hosts_per_leaf": 2},
    "workloads": [{"kind": "incast", "senders": 3, "sru_bytes": 1.0e9, "rounds": 2}],
}
RAILS = {
    "name": "two-servers",
    "duration_s": 2,
    "fabric": {"kind": "rail_optimized", "servers": 2, "gpus_per_server": 2},
}
BY_LEAF = {"kv-a": ["spine0", "leaf0", "h0", "h1"], "kv-b": ["spine1", "leaf1", "h2", "h3"]}
BASES = {"leaves": LEAVES, "rails": RAILS}


def _spec(base: dict, cluster: object) -> dict:
    return copy.deepcopy(base) | {"cluster": cluster}


def _load(
    spec: dict, overrides: list[str] = (), base_dir: Path | None = None, captures: list[str] = ()
):
    return load_spec(
        yaml.safe_dump(spec, sort_keys=False),
        list(overrides),
        base_dir=base_dir,
        captures=list(captures),
    )


BAD = [
    (
        "a placement without servers",
        "leaves",
        {"servers": [], "placement": {"a": ["h0"]}},
        "cluster.servers",
        ["missing", "cluster.local: N"],
    ),
    (
        "servers and local",
        "leaves",
        {"servers": ["a"], "local": 2},
        "cluster.local",
        ["give servers or local, not both"],
    ),
    (
        "local with a placement",
        "leaves",
        {"local": 2, "placement": {"a": ["h0"]}},
        "cluster.placement",
        ["auto with cluster.local"],
    ),
    ("local above 16", "leaves", {"local": 17}, "cluster.local", ["0 to 16"]),
    (
        "17 servers",
        "leaves",
        {"servers": [f"s{i}" for i in range(17)]},
        "cluster.servers",
        ["17 items"],
    ),
    ("servers left out", "leaves", {}, "cluster.servers", ["missing"]),
    (
        "not user@host",
        "leaves",
        {"servers": ["a", "bad user@h"]},
        "cluster.servers.1",
        ["'bad user@h'", "user@host"],
    ),
    (
        "bad host",
        "leaves",
        {"servers": [{"host": "a b"}]},
        "cluster.servers.0.host",
        ["'a b'", "a host name or address"],
    ),
    (
        "unknown server key",
        "leaves",
        {"servers": [{"host": "a", "port": 22}]},
        "cluster.servers.0.port",
        ["unknown key", "host, user"],
    ),
    (
        "a server twice",
        "leaves",
        {"servers": ["a", "b", "root@a"]},
        "cluster.servers.2",
        ["already cluster.servers.0", "each server once"],
    ),
    (
        "a host twice as two users",
        "leaves",
        {"servers": ["kv@a", "root@a"]},
        "cluster.servers.1",
        ["already cluster.servers.0"],
    ),
    (
        "this machine twice",
        "leaves",
        {"servers": ["localhost", "b", "127.0.0.1"]},
        "cluster.servers.2",
        ["both are this machine"],
    ),
    (
        "gre",
        "leaves",
        {"servers": ["a"], "link": "gre"},
        "cluster.link",
        ["no GRE", "VXLAN", "vxlan, ssh"],
    ),
    (
        "unknown link",
        "leaves",
        {"servers": ["a"], "link": "carrier-pigeon"},
        "cluster.link",
        ["one of vxlan, ssh"],
    ),
    (
        "no ssh config file",
        "leaves",
        {"servers": ["a"], "ssh_config": "absent"},
        "cluster.ssh_config",
        ["no such file", "relative to the spec file's folder"],
    ),
    (
        "unknown cluster key",
        "leaves",
        {"servers": ["a"], "port": 22},
        "cluster.port",
        ["unknown key", "servers, local, placement, link, ssh_config"],
    ),
    (
        "more servers than whole units",
        "leaves",
        {"servers": list("abcde")},
        "cluster.servers",
        ["at most 4 servers", "4 units placed whole"],
    ),
    (
        "placement neither auto nor a mapping",
        "leaves",
        {"servers": ["a"], "placement": "even"},
        "cluster.placement",
        ["'even'", "one of auto"],
    ),
    (
        "placement on a server not listed",
        "leaves",
        {"servers": ["kv-a", "kv-b"], "placement": BY_LEAF | {"kv-c": ["h0"]}},
        "cluster.placement.kv-c",
        ["a host of cluster.servers: kv-a, kv-b"],
    ),
    (
        "a server without nodes",
        "leaves",
        {"servers": ["kv-a", "kv-b", "kv-c"], "placement": BY_LEAF},
        "cluster.placement.kv-c",
        ["missing", "the nodes server kv-c emulates"],
    ),
    (
        "a node not in the fabric",
        "leaves",
        {"servers": ["kv-a", "kv-b"], "placement": BY_LEAF | {"kv-b": ["gpu9", "leaf1"]}},
        "cluster.placement.kv-b.0",
        ["'gpu9'", "a node of this spine_leaf fabric"],
    ),
    (
        "a node on two servers",
        "leaves",
        {"servers": ["kv-a", "kv-b"], "placement": BY_LEAF | {"kv-b": [*BY_LEAF["kv-b"], "h0"]}},
        "cluster.placement.kv-b.4",
        ["'h0'", "h0 is already on kv-a"],
    ),
    (
        "a node on no server",
        "leaves",
        {"servers": ["kv-a", "kv-b"], "placement": BY_LEAF | {"kv-b": ["leaf1", "h2", "h3"]}},
        "cluster.placement",
        ["spine1 on no server", "every node of the fabric"],
    ),
    (
        "an NVLink domain split",
        "rails",
        {
            "servers": ["kv-a", "kv-b"],
            "placement": {
                "kv-a": ["rail0", "spine0", "nvl0", "gpu0_0", "nvl1", "gpu1_0", "gpu1_1"],
                "kv-b": ["rail1", "spine1", "gpu0_1"],
            },
        },
        "cluster.placement.kv-b.2",
        ["'gpu0_1'", "GPU server 0", "NVLink domain", "nvl0 is on kv-a"],
    ),
]


@pytest.mark.parametrize(
    ("base", "cluster", "path", "fragments"), [b[1:] for b in BAD], ids=[b[0] for b in BAD]
)
def test_bad_clusters_name_the_key_path_the_value_and_what_is_allowed(
    base, cluster, path, fragments, tmp_path
):
    with pytest.raises(SpecError) as info:
        _load(_spec(BASES[base], cluster), base_dir=tmp_path)
    message = str(info.value)
    assert info.value.path == path and message.startswith(f"{path}:"), message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"


def test_local_zero_without_servers_is_this_machine_alone(tmp_path):
    spec = _load(_spec(BASES["leaves"], {"local": 0}), base_dir=tmp_path)
    assert spec.resolved["cluster"]["servers"] == [] and spec.resolved["cluster"]["local"] == 0


def test_defaults_one_server_and_no_section_mean_one_machine():
    resolved = _load(_spec(LEAVES, {"servers": ["localhost"]})).resolved["cluster"]
    assert resolved == {
        "servers": [{"host": "localhost", "user": "root"}],
        "local": None,
        "placement": "auto",
        "link": "vxlan",
        "ssh_config": None,
    }
    assert _load(LEAVES).resolved["cluster"] is None


def test_servers_as_text_or_mappings_resolve_alike_and_round_trip(tmp_path):
    (tmp_path / "ssh_config").write_text("Host *\n  StrictHostKeyChecking no\n")
    written = {
        "servers": ["kv@10.0.0.1", {"host": "10.0.0.2"}],
        "link": "ssh",
        "ssh_config": "ssh_config",
    }
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(_spec(LEAVES, written)))
    spec = load_spec(spec_file)
    cluster = spec.resolved["cluster"]
    assert cluster["servers"] == [
        {"host": "10.0.0.1", "user": "kv"},
        {"host": "10.0.0.2", "user": "root"},
    ]
    assert cluster["ssh_config"] == str((tmp_path / "ssh_config").resolve())
    servers = servers_of(spec.config.cluster)
    assert [s.dest for s in servers] == ["kv@10.0.0.1", "root@10.0.0.2"]
    assert servers[0].ssh_args()[1:3] == ["-F", cluster["ssh_config"]]
    assert load_spec(resolved_yaml(spec)).resolved == spec.resolved


def test_an_explicit_placement_is_kept_and_placed_as_written():
    spec = _load(_spec(LEAVES, {"servers": ["kv-a", "kv-b"], "placement": BY_LEAF}))
    cluster = spec.resolved["cluster"]
    assert cluster["placement"] == BY_LEAF
    placement = cluster_placement(spec.config.cluster, spec.fabric(), Scale(1e-4), DEFAULT)
    assert {m.name: set(m.nodes) for m in placement.machines} == {
        k: set(v) for k, v in BY_LEAF.items()
    }
    assert sorted(f"{lk.a}-{lk.b}" for lk in placement.cut) == ["leaf0-spine1", "leaf1-spine0"]


def test_auto_placement_keeps_every_nvlink_domain_on_one_server():
    rails = _spec(RAILS, {"servers": ["kv-a", "kv-b"]})
    rails["fabric"] = {"kind": "rail_optimized", "servers": 4, "gpus_per_server": 4}
    spec = _load(rails)
    fabric = spec.fabric()
    placement = cluster_placement(spec.config.cluster, fabric, Scale(1e-4), DEFAULT)
    for domain in server_domains(fabric).values():
        assert len({placement.machine_of[n] for n in domain}) == 1, domain
    assert {m.name for m in placement.machines if m.hosts} == {"kv-a", "kv-b"}


def test_cluster_option_sets_the_servers_as_a_set_would():
    spec = _load(
        _spec(LEAVES, {"servers": ["old-a", "old-b"], "link": "ssh"}),
        [cluster_override("kv@10.0.0.1, 10.0.0.2")],
    )
    servers = spec.resolved["cluster"]["servers"]
    assert servers == [{"host": "10.0.0.1", "user": "kv"}, {"host": "10.0.0.2", "user": "root"}]
    assert spec.resolved["cluster"]["link"] == "ssh"  # the rest of the section stays
    assert _load(LEAVES, [cluster_override("a")]).resolved["cluster"]["placement"] == "auto"


@pytest.fixture
def nothing_built(monkeypatch):
    """Any build, preflight or run fails the test (and never touches the machine)."""
    import experiments.orchestration.runner as runner
    import topologies.machine as probes

    def built(*args, **kwargs):
        raise AssertionError("something was built")

    for module, name in ((runner, "run_spec"), (runner, "fabric_up"), (probes, "preflight")):
        monkeypatch.setattr(module, name, built)


@pytest.fixture
def leaves_file(tmp_path):
    path = tmp_path / "leaves.yaml"
    path.write_text(yaml.safe_dump(_spec(LEAVES, {"servers": ["old-a", "old-b"]})))
    return path


def test_dry_run_names_each_server_and_each_cut_link_of_the_cluster_option(
    leaves_file, nothing_built, capsys
):
    assert main(["run", str(leaves_file), "--cluster", "kv@kv-a,kv-b", "--dry-run"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "cluster: 2 servers (kv@kv-a, root@kv-b)" in out and "old-a" not in out
    spec = load_spec(leaves_file, [cluster_override("kv@kv-a,kv-b")])
    placement = cluster_placement(spec.config.cluster, spec.fabric(), Scale(1e-4), DEFAULT)
    assert placement.cut
    for lk in placement.cut:
        assert f"{lk.a}-{lk.b}" in out
    assert "placement on 2 machines" in out and "across machine boundaries" in out
    assert "kv-a" in out.split("placement on 2 machines")[1]


def test_dry_run_shows_an_explicit_placement_as_written(tmp_path, nothing_built, capsys):
    path = tmp_path / "given.yaml"
    path.write_text(
        yaml.safe_dump(_spec(LEAVES, {"servers": ["kv-a", "kv-b"], "placement": BY_LEAF}))
    )
    assert main(["run", str(path), "--dry-run"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "as cluster.placement gives it" in " ".join(out.split())  # a title may wrap
    assert "leaf0-spine1" in out and "leaf1-spine0" in out and "cut: 2 links" in out
    tables = out.split("placement on 2 machines")[1]
    row_a = next(line for line in tables.splitlines() if "kv-a" in line)
    assert "leaf0, spine0" in row_a and "h0, h1" in row_a and "h2" not in row_a


def test_a_capture_at_a_node_on_another_server_is_refused_before_anything_is_built(
    leaves_file, nothing_built, capsys, tmp_path
):
    out_dir = tmp_path / "results"
    argv = [
        "run",
        str(leaves_file),
        "--out",
        str(out_dir),
        "--capture",
        "h0",
        "--capture",
        "leaf1:1",
    ]
    assert main(argv) == EXIT_FAILED
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "capture.at names" in err and "emulated on another server" in err
    assert not out_dir.exists()
    spec = load_spec(leaves_file)
    run = expand(spec)[0]
    require_engine(run.config, run.fabric())  # no capture: nothing refused
    with pytest.raises(EngineUnavailable, match="h0"):
        captured = load_spec(leaves_file, captures=["h0"])
        require_engine(captured.config, expand(captured)[0].fabric())
    placed = _load(
        _spec(
            LEAVES,
            {
                "servers": ["localhost", "b"],
                "placement": {
                    "localhost": ["h0", "h1", "leaf0", "spine0"],
                    "b": ["h2", "h3", "leaf1", "spine1"],
                },
            },
        ),
        captures=["h0", "leaf0:1"],
    )
    require_engine(placed.config, expand(placed)[0].fabric())  # captured here: allowed


def test_a_run_on_other_machines_goes_on_to_build_its_fabric(
    leaves_file, nothing_built, capsys, tmp_path
):
    # their agents run there now (traffic.agents.sites): nothing refuses the run
    assert main(["run", str(leaves_file), "--out", str(tmp_path / "r")]) == EXIT_FAILED
    assert "something was built" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["run", "cli"])
@pytest.mark.parametrize(
    "argument, says",
    [
        ("bad user@h", "'bad user@h' is not user@host"),
        ("a,a", "names a more than once"),
        ("", "give user@host"),
    ],
)
def test_a_bad_cluster_option_is_a_usage_error_with_what_to_write(
    command, argument, says, leaves_file, nothing_built, capsys
):
    assert main([command, str(leaves_file), "--cluster", argument]) == EXIT_USAGE
    assert says in capsys.readouterr().err
