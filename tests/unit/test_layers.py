"""Layering as a contract (#27): the tables below are the rules, and the picture of them
is ``docs/architecture.md`` (a test here fails when the two disagree).

- **Packages.** Arrows point one way: topologies ← controller ← experiments and
  topologies ← traffic ← experiments; controller and traffic do not know each other and
  no package imports experiments. Only the command line (``experiments.cli``) may reach
  the checkout's ``benchmarks`` (which import everything but the command line), and
  nothing else imports the command line. Every top-level package (a folder with an
  ``__init__.py`` at the root, or a name in pyproject's ``packages.find``) is in
  ``PACKAGES``: a new one fails until it is given its place.
- **Rooms.** Inside ``experiments``, ``traffic`` and ``controller`` the rooms are listed
  top to bottom (``ROOMS``); a module may import its own room and the rooms below it,
  never one above.
- **Third-party libraries where they belong** (``THIRD_PARTY``): Mininet only where
  fabrics are built, os-ken only in the controller's shim, sockets only in the agents,
  measurement and the controller's channel (and the few places named with why).
- **No import cycles** between our modules.

Parsed from the source (every import statement, also those inside functions), so a
wrong arrow fails here before it becomes a cycle. ``KNOWN_BACK_ARROWS`` lists what
main still does wrong while #27 is being merged; it must only shrink."""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"

# Every top-level package, and the packages it may import (itself included).
PACKAGES: dict[str, set[str]] = {
    "topologies": {"topologies"},
    "controller": {"controller", "topologies"},
    "traffic": {"traffic", "topologies"},
    "experiments": {"topologies", "controller", "traffic", "experiments"},
    "benchmarks": {"topologies", "controller", "traffic", "experiments", "benchmarks"},
}
CLI = "experiments.cli"

# Rooms inside a package, top to bottom: a room imports its own and those below it.
ROOMS: dict[str, tuple[str, ...]] = {
    "experiments": ("cli", "bmwg", "orchestration", "output", "analysis", "measurement", "spec"),
    # agents: processes and sockets; serving: the live driver; workloads: schedules;
    # models: traffic/*.py (presets, compute, traces, profiles, the driver protocol,
    # the wire format and header: data and pure functions)
    "traffic": ("agents", "serving", "workloads", "models"),
    # process: what the testbed starts (the controller process, ovs-ofctl installs);
    # shim: os-ken and the controller process's edges; core: the pure policy core
    "controller": ("process", "shim", "core"),
}
# A module's room: its sub-package's name, else its entry here, else the package's
# DEFAULT_ROOM (a package without one keeps every module in a sub-package room).
ROOM_OF_MODULE: dict[str, str] = {
    "controller.process": "process",
    "controller.ofctl": "process",
    "controller.app": "shim",
    "controller.main": "shim",
    "controller.ofp": "shim",
    "controller.channel": "shim",
    "controller.tls": "shim",
}
DEFAULT_ROOM = {"traffic": "models", "controller": "core"}

# Where a third-party library may be imported: a module, or a package / room (every
# module under it), each with why. Nowhere else.
THIRD_PARTY: dict[str, dict[str, str]] = {
    "mininet": {
        "topologies.builder": "builds a fabric as a Mininet network (and its CLI)",
        "topologies.cluster.network": "builds a fabric across servers as one Mininet network",
        "topologies.cluster.nodes": "Mininet's remote hosts, switches and links of a cluster",
        "topologies.shell_output": "Mininet's node classes with a tolerant shell decoder",
        "topologies.machine": "asks whether Mininet imports, and its version (env.json)",
        "benchmarks.setup_time": "times a plain Mininet build, the alternative measured",
    },
    "os_ken": {
        "controller.app": "the os-ken application: OpenFlow events in, messages out",
        "controller.main": "starts os-ken's AppManager in the controller process",
    },
    "socket": {
        "traffic.agents": "the agents send every message over kernel sockets",
        "experiments.measurement": "the samplers read the kernel over netlink sockets",
        "controller.channel": "the controller's control channel (a Unix socket)",
        "controller.process": "a free TCP port for the controller's OpenFlow listener",
        "topologies.ovs_tx": "sizes ovs-vswitchd's own sockets' buffers (borrowed fds)",
        "topologies.cluster.probe": "resolves a server's name (getaddrinfo), opens none",
        "experiments.orchestration.cluster": "resolves a server's name, opens none",
    },
    "socketserver": {
        "controller.channel": "the controller's control channel server",
    },
}

# Arrows main still has that #27 removes (experiments/analysis and experiments/output
# are reworked on another branch): each is allowed by the room and cycle checks until
# then. The lead empties this table after merging; an entry whose arrow is gone fails.
KNOWN_BACK_ARROWS: dict[tuple[str, str], str] = {}


# ----- the parser ---------------------------------------------------------------------


def imported_names(source: str, module: str) -> dict[str, int]:
    """Every dotted name ``module`` (e.g. ``experiments.cli.run``; a package's
    ``__init__`` is the package itself) imports, ours or not, relative imports made
    absolute, ``from m import x`` counted as ``m.x`` too since x may be a module, each
    with the first line that does."""
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the module's package, up level - 1
                parts = module.split(".")[: -node.level]
                base = ".".join(parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            if name and (name not in found or node.lineno < found[name]):
                found[name] = node.lineno
    return found


def imported_modules(source: str, module: str) -> dict[str, int]:
    """The names of ours that ``module`` imports (see ``imported_names``)."""
    return {
        n: line for n, line in imported_names(source, module).items() if n.split(".")[0] in PACKAGES
    }


def imported_packages(source: str, module: str) -> dict[str, int]:
    """Our top-level packages ``module`` imports, with the first line."""
    found: dict[str, int] = {}
    for name, line in imported_modules(source, module).items():
        top = name.split(".")[0]
        found[top] = min(line, found.get(top, line))
    return found


def _in_cli(path: Path) -> bool:
    return path.relative_to(ROOT).parts[:2] == ("experiments", "cli")


def dotted(path: Path) -> str:
    """The module's dotted name; for an ``__init__`` a child of the package, so that
    relative imports resolve from the package itself."""
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def module_name(path: Path) -> str:
    """The name Python imports the file as (a package's ``__init__`` is the package)."""
    name = dotted(path)
    return name.removesuffix(".__init__")


def modules() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def sources() -> dict[str, tuple[str, str]]:
    """Every module of ours: name -> (the dotted name imports resolve from, source)."""
    return {module_name(p): (dotted(p), p.read_text()) for p in modules()}


# ----- the rules ----------------------------------------------------------------------


def room(name: str) -> str | None:
    """The room of module (or imported name) ``name``; None outside the rooms (a
    package without rooms, a package's own ``__init__``, an experiments module outside
    every sub-package room)."""
    parts = name.split(".")
    if parts[0] not in ROOMS or len(parts) < 2:
        return None
    if ".".join(parts[:2]) in ROOM_OF_MODULE:
        return ROOM_OF_MODULE[".".join(parts[:2])]
    if parts[1] in ROOMS[parts[0]]:
        return parts[1]
    return DEFAULT_ROOM.get(parts[0])


def resolve(name: str, known: set[str]) -> str | None:
    """The module of ours an imported name loads: itself, or the longest prefix that is
    a module (``m.x`` of ``from m import x`` where x is not a module)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def back_arrows(module: str, imports: dict[str, int], known: Iterable[str] = ()) -> list[str]:
    """One line per module ``module`` imports up its package's rooms (those in
    ``KNOWN_BACK_ARROWS`` aside); ``known``: our modules, to name what is imported by
    its module (without them, by the name imported)."""
    here = room(module)
    if here is None:
        return []
    known = set(known)
    package = module.split(".")[0]
    order = ROOMS[package]
    wrong, seen = [], set()
    for name, line in sorted(imports.items(), key=lambda kv: (kv[1], kv[0])):
        if any(o.startswith(name + ".") and at == line for o, at in imports.items()):
            continue  # ``from m import x``: m.x says it
        there = room(name)
        if name.split(".")[0] != package or there is None:
            continue
        target = resolve(name, known) or name
        if order.index(there) >= order.index(here) or (module, target) in KNOWN_BACK_ARROWS:
            continue
        if target not in seen:
            seen.add(target)
            below = " → ".join(order[order.index(here) :])
            wrong.append(
                f"{module} (room {here}) imports {target} (line {line}), room {there} "
                f"above it: {package} is {' → '.join(order)}; {here} may import "
                f"{below}"
            )
    return wrong


def import_graph(sources: dict[str, tuple[str, str]]) -> dict[str, dict[str, int]]:
    """module -> {module of ours it imports: first line}, from ``sources`` (name ->
    (the dotted name imports resolve from, source)); ``KNOWN_BACK_ARROWS`` left out."""
    known = set(sources)
    graph: dict[str, dict[str, int]] = {}
    for name, (base, text) in sources.items():
        edges = graph.setdefault(name, {})
        for imported, line in imported_modules(text, base).items():
            target = resolve(imported, known)
            if target and target != name and (name, target) not in KNOWN_BACK_ARROWS:
                edges[target] = min(line, edges.get(target, line))
    return graph


def find_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One cycle (``[a, b, ..., a]``) through each strongly connected set of modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    sccs: list[set[str]] = []

    def visit(v: str) -> None:  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, {})):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                scc.add(w)
                if w == v:
                    break
            if len(scc) > 1:
                sccs.append(scc)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    cycles = []
    for scc in sccs:  # the shortest way back to the first module, breadth first
        start = min(scc)
        came: dict[str, str] = {}
        frontier = [start]
        while start not in came:
            nxt = []
            for v in frontier:
                for w in sorted(graph.get(v, {})):
                    if w in scc and w not in came:
                        came[w] = v
                        nxt.append(w)
            frontier = nxt
        path = [start]
        while path[-1] != start or len(path) == 1:
            path.append(came[path[-1]])
        cycles.append(path[::-1])
    return sorted(cycles)


def cycle_message(cycle: list[str], graph: dict[str, dict[str, int]]) -> str:
    steps = " → ".join(f"{a} (line {graph[a][b]})" for a, b in zip(cycle, cycle[1:], strict=False))
    return f"import cycle: {steps} → {cycle[-1]}"


def misplaced_libraries(module: str, source: str) -> list[str]:
    """One line per third-party library of ``THIRD_PARTY`` that ``module`` imports
    outside the places named for it."""
    wrong = []
    first: dict[str, int] = {}
    for name, line in imported_names(source, module).items():
        lib = name.split(".")[0]
        if lib in THIRD_PARTY:
            first[lib] = min(line, first.get(lib, line))
    for lib, line in sorted(first.items()):
        places = THIRD_PARTY[lib]
        if not any(module == p or module.startswith(p + ".") for p in places):
            wrong.append(
                f"{module} imports {lib} (line {line}); {lib} belongs in "
                f"{', '.join(places)} only (see THIRD_PARTY)"
            )
    return wrong


def top_level_packages() -> set[str]:
    """Folders with an ``__init__.py`` at the root, and pyproject's ``packages.find``."""
    found = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    return found | {pattern.rstrip("*").rstrip(".") for pattern in include}


# ----- main against the rules ---------------------------------------------------------


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_down_the_layers(path: Path) -> None:
    package = path.relative_to(ROOT).parts[0]
    allowed = PACKAGES[package] | ({"benchmarks"} if _in_cli(path) else set())
    wrong = {
        pkg: line
        for pkg, line in imported_packages(path.read_text(), dotted(path)).items()
        if pkg not in allowed
    }
    assert not wrong, f"{path.relative_to(ROOT)} imports " + ", ".join(
        f"{pkg} (line {line})" for pkg, line in wrong.items()
    )


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_only_the_command_line_imports_the_command_line(path: Path) -> None:
    rel = path.relative_to(ROOT)
    if _in_cli(path):
        return
    up = {
        m: line
        for m, line in imported_modules(path.read_text(), dotted(path)).items()
        if m == CLI or m.startswith(CLI + ".")
    }
    assert not up, f"{rel} imports the command line: {up}"


def test_imports_point_down_the_rooms() -> None:
    everything = sources()
    known = set(everything)
    wrong = [
        line
        for name, (base, text) in everything.items()
        for line in back_arrows(name, imported_modules(text, base), known)
    ]
    assert not wrong, "imports up the rooms:\n" + "\n".join(wrong)


def test_every_module_is_in_a_room() -> None:
    lost = [m for m in sources() if m.split(".")[0] in ROOMS and "." in m and room(m) is None]
    assert not lost, f"modules outside every room of their package: {lost}"


def test_no_import_cycles() -> None:
    graph = import_graph(sources())
    cycles = find_cycles(graph)
    assert not cycles, "\n".join(cycle_message(c, graph) for c in cycles)


def test_third_party_libraries_stay_in_their_places() -> None:
    wrong = [
        line for name, (base, text) in sources().items() for line in misplaced_libraries(name, text)
    ]
    assert not wrong, "\n".join(wrong)


def test_every_place_named_for_a_library_still_uses_it() -> None:
    """A place that no longer imports its library leaves the table (it would let a
    later import in unseen)."""
    users: dict[str, set[str]] = {lib: set() for lib in THIRD_PARTY}
    for name, (base, text) in sources().items():
        for imported in imported_names(text, base):
            if imported.split(".")[0] in users:
                users[imported.split(".")[0]].add(name)
    stale = [
        f"{lib}: {place}"
        for lib, places in THIRD_PARTY.items()
        for place in places
        if not any(u == place or u.startswith(place + ".") for u in users[lib])
    ]
    assert not stale, f"places in THIRD_PARTY that no longer import the library: {stale}"


def test_known_back_arrows_still_exist() -> None:
    """An entry of ``KNOWN_BACK_ARROWS`` whose arrow is gone is removed from it."""
    everything = sources()
    known = set(everything)
    present = {
        (name, resolve(imported, known))
        for name, (base, text) in everything.items()
        for imported in imported_modules(text, base)
    }
    gone = [arrow for arrow in KNOWN_BACK_ARROWS if arrow not in present]
    assert not gone, f"fixed, so remove from KNOWN_BACK_ARROWS: {gone}"


def test_every_top_level_package_is_named() -> None:
    unnamed = top_level_packages() - set(PACKAGES)
    assert not unnamed, (
        f"top-level packages not in PACKAGES (give each its place in the layers, here "
        f"and in docs/architecture.md): {sorted(unnamed)}"
    )
    assert all((ROOT / pkg / "__init__.py").exists() for pkg in PACKAGES)


def test_the_picture_says_what_the_tables_say() -> None:
    """docs/architecture.md names every package, every room order, every module placed
    by name and every place a library may be imported."""
    doc = DOC.read_text()
    expected = [f"`{pkg}`" for pkg in PACKAGES]
    expected += [" → ".join(order) for order in ROOMS.values()]
    expected += [f"`{m}`" for m in ROOM_OF_MODULE]
    expected += [f"`{place}`" for places in THIRD_PARTY.values() for place in places]
    expected += [f"`{lib}`" for lib in THIRD_PARTY]
    missing = [e for e in expected if e not in doc]
    assert not missing, f"{DOC.relative_to(ROOT)} does not say: {missing}"


# ----- the checker against wrong sources ----------------------------------------------


def test_the_parser_sees_a_wrong_arrow() -> None:
    """The check above is only as good as its parser: an import hidden in a
    function body, a plain ``import``, and a relative one are all seen."""
    src = "def f():\n    from experiments.cli import main\n\nfrom .x import y\nimport traffic.x\n"
    got = imported_packages(src, "topologies.builder")
    assert got == {"experiments": 2, "topologies": 4, "traffic": 5}
    assert "experiments.cli.main" in imported_modules(src, "topologies.builder")
    up = imported_modules("from ..cli import run\n", "experiments.orchestration.runner")
    assert "experiments.cli.run" in up  # a relative import of the command line is seen


def test_a_back_arrow_inside_a_room_fails() -> None:
    src = "import pandas\n\n\ndef f():\n    from experiments.output.report import _fmt\n"
    module = "experiments.analysis.x"
    wrong = back_arrows(module, imported_modules(src, module))
    assert wrong == [
        "experiments.analysis.x (room analysis) imports experiments.output.report._fmt "
        "(line 5), room output above it: experiments is cli → bmwg → orchestration → output → "
        "analysis → measurement → spec; analysis may import analysis → measurement → spec"
    ]
    down = "from experiments.measurement import tcpcount\nfrom ..spec.load import Spec\n"
    assert back_arrows(module, imported_modules(down, module)) == []
    # relative, in traffic: a workload reaching up into the agents
    replay = imported_modules("from ..agents.deps import Tracker\n", "traffic.workloads.r")
    assert "room agents above it" in back_arrows("traffic.workloads.r", replay)[0]
    # a module of the package itself is in its default room: models import no workloads
    model = imported_modules("from traffic.workloads import schedule\n", "traffic.header")
    assert "room workloads above it" in back_arrows("traffic.header", model)[0]
    # the controller's pure core never reaches the os-ken shim
    shim = imported_modules("from .ofp import encode\n", "controller.session")
    assert "room shim above it" in back_arrows("controller.session", shim)[0]
    down = imported_modules("from .session import S\n", "controller.app")
    assert back_arrows("controller.app", down) == []


def test_a_cycle_fails() -> None:
    fake = {
        "topologies.a": ("topologies.a", "from topologies import b\n"),
        "topologies.b": ("topologies.b", "import os\n\n\ndef f():\n    from .c import x\n"),
        "topologies.c": ("topologies.c", "from topologies.a import y\n"),
        "topologies.d": ("topologies.d", "from topologies.a import y\n"),
    }
    graph = import_graph(fake)
    cycles = find_cycles(graph)
    assert cycles == [["topologies.a", "topologies.b", "topologies.c", "topologies.a"]]
    assert cycle_message(cycles[0], graph) == (
        "import cycle: topologies.a (line 1) → topologies.b (line 5) → topologies.c (line 1)"
        " → topologies.a"
    )
    del fake["topologies.c"]
    assert find_cycles(import_graph(fake)) == []


def test_a_library_outside_its_places_fails() -> None:
    assert misplaced_libraries("experiments.analysis.x", "import mininet.net\n") == [
        "experiments.analysis.x imports mininet (line 1); mininet belongs in topologies.builder, "
        "topologies.cluster.network, topologies.cluster.nodes, topologies.shell_output, "
        "topologies.machine, benchmarks.setup_time only (see THIRD_PARTY)"
    ]
    hidden = "def f():\n    from os_ken.lib import hub\n"
    assert "os_ken (line 2)" in misplaced_libraries("controller.session", hidden)[0]
    assert misplaced_libraries("controller.app", hidden) == []
    assert "socket (line 1)" in misplaced_libraries("traffic.workloads.x", "import socket\n")[0]
    assert misplaced_libraries("traffic.agents.host", "import socket\n") == []
    assert misplaced_libraries("topologies.fabric", "import minineta\n") == []
