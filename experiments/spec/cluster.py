"""The ``cluster:`` section of a spec: the servers that emulate the fabric together,
which nodes each emulates, and what carries the links cut between them.

    cluster:
      servers: [root@10.251.0.11, {host: 10.251.0.12, user: kv}]   # 1 to 16
      placement: auto          # or {10.251.0.11: [spine0, leaf0, h0, h1], ...}
      link: vxlan              # or ssh
      ssh_config: ssh_config   # ssh -F, relative to the spec's folder

Resolved, each server is ``{host, user}`` (user default root) and ``ssh_config`` an
absolute path or null. ``placement: auto`` stays ``auto``: the partition
(``topologies.placement.place``) weighs each server by its envelope, known only where
the run is planned. An explicit placement names each server by its host and covers
every node of the fabric once, each GPU server's NVLink domain on one server
(``topologies.placement.server_domains``). One server means one machine; a spec
without the section resolves ``cluster: null``, the same.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from experiments.spec.schema import (
    Check,
    Ctx,
    Field,
    SpecError,
    bad,
    choice,
    either,
    existing_file,
    integer,
    join,
    list_of,
    listing,
    mapping,
    missing,
    node,
    optional,
    section,
    text,
)
from topologies.cluster.ssh import HOST_PATTERN, LOCAL_NAMES, USER_PATTERN, Server, parse_servers
from topologies.placement import server_domains, units

MAX_SERVERS = 16
LINKS = ("vxlan", "ssh")
NO_GRE = "this kernel has no GRE (gretap) module: VXLAN carries the links between servers"
AUTO = "auto"


def _server_text() -> Check:
    """``user@host`` (user default root), resolved to ``{host, user}``."""
    check = text(f"(?:{USER_PATTERN}@)?{HOST_PATTERN}", "user@host (user default root)")

    def fn(value: Any, path: str, ctx: Ctx) -> dict[str, str]:
        (server,) = parse_servers(check(value, path, ctx))
        return {"host": server.host, "user": server.user}

    return Check(fn, check.allowed, check.accepts, check.json)


SERVER = section(
    {
        "host": Field(text(HOST_PATTERN, "a host name or address"), doc="its name or address"),
        "user": Field(text(USER_PATTERN, "a login name"), "root", "who ssh logs in as"),
    }
)


def _link() -> Check:
    """A choice of LINKS that says why GRE is not one."""
    check = choice(LINKS)

    def fn(value: Any, path: str, ctx: Ctx) -> str:
        if value in ("gre", "gretap"):
            raise bad(path, value, check.allowed, NO_GRE)
        return check(value, path, ctx)

    return Check(fn, check.allowed, check.accepts, check.json)


def _servers_post(servers: list[dict[str, str]], path: str) -> None:
    """No server twice, and this machine (localhost, 127.0.0.1) at most once."""
    seen: dict[str, int] = {}
    for i, server in enumerate(servers):
        host = server["host"]
        key = "localhost" if host in LOCAL_NAMES else host
        if key in seen:
            why = f"{host} is already cluster.servers.{seen[key]}"
            if key == "localhost" and host != servers[seen[key]]["host"]:
                why += f" ({servers[seen[key]]['host']}: both are this machine)"
            raise bad(join(path, f"servers.{i}"), host, "each server once", why)
        seen[key] = i


def _placement_post(out: dict[str, Any], path: str, ctx: Ctx) -> None:
    """Every node on one server of ``servers``, no NVLink domain split."""
    assert ctx.fabric is not None
    hosts = [s["host"] for s in out["servers"]]
    where = join(path, "placement")
    given = out["placement"]
    for key in given:
        if str(key) not in hosts:
            raise bad(join(where, key), key, f"a host of cluster.servers: {listing(hosts)}")
    for host in hosts:
        if host not in given:
            raise missing(join(where, host), f"the nodes server {host} emulates")
    server_of: dict[str, str] = {}
    for host, names in given.items():
        for i, name in enumerate(names):
            if name in server_of:
                why = f"{name} is already on {server_of[name]}"
                raise bad(join(where, f"{host}.{i}"), name, "each node on one server", why)
            server_of[name] = host
    left = [n.name for n in ctx.fabric.nodes if n.name not in server_of]
    if left:
        raise SpecError(
            f"{where}: {listing(left)} on no server: allowed: every node of the "
            "fabric on one server",
            where,
            left,
        )
    for number, domain in server_domains(ctx.fabric).items():
        first = server_of[domain[0]]
        for name in domain:
            if server_of[name] != first:
                host = server_of[name]
                why = (
                    f"GPU server {number} ({listing(domain)}) is one NVLink domain and "
                    f"{domain[0]} is on {first}"
                )
                i = given[host].index(name)
                raise bad(
                    join(where, f"{host}.{i}"),
                    name,
                    f"{name} on {first}, with the rest of its server",
                    why,
                )


def _cluster_post(out: dict[str, Any], path: str, ctx: Ctx) -> None:
    if out["local"]:
        if out["servers"]:
            raise bad(
                join(path, "local"),
                out["local"],
                "0 when cluster.servers are given",
                "local: N brings up its own servers (kvfabric cluster local up N); "
                "give servers or local, not both",
            )
        if out["placement"] != AUTO:
            raise bad(
                join(path, "placement"),
                out["placement"],
                "auto with cluster.local",
                "a local cluster's addresses are known only once it is up",
            )
        out["servers"] = [
            {"host": f"local-{i}", "user": "root"}  # placeholders until up
            for i in range(1, out["local"] + 1)
        ]
        _cluster_post_servers(out, path, ctx)
        out["servers"] = []
        return
    if not out["servers"]:  # local: 0 and no servers: this machine alone (a sweep's point)
        if out["local"] is None or out["placement"] != AUTO:
            raise missing(
                join(path, "servers"),
                "the servers cluster.placement names "
                "(or cluster.local: N for a local cluster of N servers)",
            )
        return
    _cluster_post_servers(out, path, ctx)


def _cluster_post_servers(out: dict[str, Any], path: str, ctx: Ctx) -> None:
    _servers_post(out["servers"], path)
    if out["placement"] != AUTO:
        _placement_post(out, path, ctx)
        return
    assert ctx.fabric is not None
    whole = len(units(ctx.fabric))
    if len(out["servers"]) > whole:
        raise bad(
            join(path, "servers"),
            [s["host"] for s in out["servers"]],
            f"at most {whole} servers for placement auto",
            f"this {ctx.fabric.kind} fabric has {whole} units placed whole (GPU servers, "
            "switches with their single-homed hosts)",
        )


CLUSTER = section(
    {
        "servers": Field(
            list_of(either(_server_text(), SERVER), 0, MAX_SERVERS),
            [],
            doc="the machines that emulate the fabric together: user@host or {host, user} "
            "(localhost is this machine; --cluster sets them)",
        ),
        "local": Field(
            optional(integer(0, MAX_SERVERS)),
            None,
            "N > 0 instead of servers: the run brings up a local cluster of N server "
            "namespaces on this machine and removes it after (kvfabric cluster local)",
        ),
        "placement": Field(
            either(choice([AUTO]), mapping(text(), list_of(node(), 1, distinct=True))),
            AUTO,
            "auto (each GPU server's NVLink domain whole, balanced by each server's envelope) "
            "or host -> its nodes: every node once, no NVLink domain split",
        ),
        "link": Field(_link(), "vxlan", "what carries a link cut between servers"),
        "ssh_config": Field(
            optional(existing_file(json={"type": "string"})),
            None,
            "ssh -F file to reach the servers (relative to the spec)",
        ),
    },
    _cluster_post,
)


def servers_of(cluster: Any) -> tuple[Server, ...]:
    """The servers of a run configuration's ``cluster`` section (``config.Cluster``), in
    order, with its ssh config."""
    config = Path(cluster.ssh_config) if cluster.ssh_config else None
    return tuple(Server(s.host, s.user, config) for s in cluster.servers)


def cluster_override(argument: str) -> str:
    """``--cluster user@host1,host2`` as the ``--set`` item it stands for, or the
    ``ServerError`` of ``parse_servers``."""
    servers = [{"host": s.host, "user": s.user} for s in parse_servers(argument)]
    return f"cluster.servers={json.dumps(servers)}"
