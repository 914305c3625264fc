"""Experiment specs: load a YAML spec, apply ``--set`` overrides, validate it against
one typed schema, and expand its sweep grid and repeats into runs.

    spec = load_spec("incast.yaml", ["workloads.0.rounds=3"], seed=7)
    for run in expand(spec, repeat=2):
        run.label          # "senders=3,seed=8"
        run.resolved       # every default filled in: the run's spec.yaml
        resolved_yaml(run)

Every error is a ``SpecError`` naming the key path, the value and what is
allowed; unknown keys are errors. The schema itself lives in ``sections``
(top level, fabric, controller, faults), ``workloads`` (workload kinds) and
``serving``, built from the typed checks of ``schema``.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml

from experiments.spec.schema import SpecError, bad
from experiments.spec.sections import validate
from experiments.spec.typed import RunConfig, config_of, fabric_of
from topologies import Fabric

__all__ = [
    "RunSpec",
    "Spec",
    "SpecError",
    "bundled_names",
    "expand",
    "find_bundled",
    "load_spec",
    "locate",
    "parse_override",
    "resolved_yaml",
]

SPECS_DIR = Path(__file__).resolve().parents[1] / "specs"  # the bundled experiments
HANDOUTS_DIR = SPECS_DIR.parent / "handouts"  # one teaching handout per bundled spec
REFERENCE_DIR = SPECS_DIR.parents[1] / "results" / "reference"  # their committed runs
NOT_SWEEPABLE = ("name", "sweep")


class _Loader(yaml.SafeLoader):
    """Safe YAML that rejects duplicate keys and reads ``1e-4`` as a number (YAML 1.1
    wants ``1.0e-4``; engineers write both)."""


def _mapping(loader: _Loader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if isinstance(key, str | int | float | bool) and key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return yaml.SafeLoader.construct_mapping(loader, node, deep)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def _parse_yaml(text: str, where: str) -> Any:
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        at = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        problem = " ".join(p for p in (exc.context, exc.problem) if p)
        raise SpecError(f"{where}{at}: YAML syntax error: {problem}") from None
    except yaml.YAMLError as exc:
        raise SpecError(f"{where}: YAML error: {exc}") from None


@dataclass(frozen=True)
class Spec:
    """A validated spec. ``resolved`` has every default filled in (without the sweep
    grid); ``raw`` is the spec as written plus overrides, from which sweep points
    are resolved; relative paths in it are relative to ``base_dir``."""

    name: str
    seed: int
    resolved: dict[str, Any]
    sweep: dict[str, list[Any]]
    raw: dict[str, Any]
    base_dir: Path
    source: Path | None = None

    @property
    def duration_s(self) -> float:
        return self.config.duration_s

    @cached_property
    def config(self) -> RunConfig:
        """The resolved spec, typed and frozen (without the sweep grid)."""
        return config_of(self.resolved)

    def fabric(self) -> Fabric:
        return fabric_of(self.config)


@dataclass(frozen=True)
class RunSpec:
    """One run of an experiment: a sweep point and a seed. ``resolved`` is its
    complete spec (sweep values and seed applied, every default filled in)."""

    experiment: str
    index: int
    label: str
    seed: int
    point: dict[str, Any] = field(default_factory=dict)
    resolved: dict[str, Any] = field(default_factory=dict)

    @property
    def duration_s(self) -> float:
        return self.config.duration_s

    @cached_property
    def config(self) -> RunConfig:
        """This run's configuration, typed and frozen: what code outside the spec room
        reads (``run.config.scale.mtu``)."""
        return config_of(self.resolved)

    def fabric(self) -> Fabric:
        return fabric_of(self.config)

    def at_time_dilation(self, d: float) -> RunSpec:
        """This run with ``scale.time_dilation`` set to ``d`` (an integer where it is one):
        a spec's ``auto`` as the planner resolved it."""
        resolved = copy.deepcopy(self.resolved)
        resolved["scale"]["time_dilation"] = int(d) if float(d).is_integer() else float(d)
        return replace(self, resolved=resolved)


# ---- overrides -----------------------------------------------------------------------------


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"workloads.0.senders=4"`` -> (["workloads", "0", "senders"], 4); the value is
    read as YAML (``[1, 2]``, ``true``, ``1e-4``, ``fp16``)."""
    key, sep, value = text.partition("=")
    parts = key.strip().split(".")
    if not sep or not all(parts):
        raise SpecError(
            f"--set {text!r}: expected key.path=value, e.g. workloads.0.senders=4", "", text
        )
    return parts, _parse_yaml(value, f"--set {key.strip()}")


def _set_path(raw: dict[str, Any], parts: list[str], value: Any) -> None:
    """Set ``raw[parts...] = value``, making missing mappings; list items must exist."""
    if parts[0] == "sweep" and len(parts) > 1:  # sweep keys are themselves dotted paths
        if not isinstance(raw.get("sweep"), dict):
            raw["sweep"] = {}
        raw["sweep"][".".join(parts[1:])] = value
        return
    here: Any = raw
    for depth, part in enumerate(parts):
        path, last = ".".join(parts[: depth + 1]), depth == len(parts) - 1
        if isinstance(here, list):
            if not part.isdigit() or int(part) >= len(here):
                span = f"0..{len(here) - 1}" if here else "none, the list is empty"
                raise SpecError(
                    f"{path}: no such list item: allowed: an index of an existing item: {span}",
                    path,
                    part,
                )
            key: Any = int(part)
        elif isinstance(here, dict):
            key = part
            if not last and here.get(key) is None:
                if parts[depth + 1].isdigit():
                    raise SpecError(
                        f"{path}: no list here to take item {parts[depth + 1]} of", path
                    )
                here[key] = {}
        else:
            parent = ".".join(parts[:depth])
            raise bad(parent, here, "a mapping or a list to set a key in")
        if last:
            here[key] = value
        else:
            here = here[key]


# ---- loading ------------------------------------------------------------------------------


def _read(source: str | Path) -> tuple[str, Path | None]:
    looks_like_file = isinstance(source, Path) or (
        "\n" not in source and (source.endswith((".yaml", ".yml")) or Path(source).is_file())
    )
    if not looks_like_file:
        return str(source), None
    file = Path(source)
    try:
        return file.read_text(encoding="utf-8"), file
    except FileNotFoundError:
        raise SpecError(f"{file}: spec file not found", "", str(file)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"{file}: cannot read the spec: {exc}", "", str(file)) from None


def load_spec(
    source: str | Path,
    overrides: Sequence[str] = (),
    seed: int | None = None,
    *,
    base_dir: str | Path | None = None,
    captures: Sequence[str] = (),
) -> Spec:
    """Read a spec file (or YAML text), apply ``--set`` overrides, ``--seed`` and
    ``--capture`` points (added to ``capture.at``),
    and validate it, sweep values included. Relative paths in the spec are
    relative to the spec file's folder (for text: ``base_dir`` or the cwd)."""
    text, file = _read(source)
    where = str(file) if file else "<spec>"
    base = Path(base_dir) if base_dir is not None else (file.parent if file else Path.cwd())
    raw = _parse_yaml(text, where)
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise bad("(spec)", raw, "a mapping of keys (name, duration_s, fabric, ...)")
    try:
        for item in overrides:
            parts, value = parse_override(item)
            try:
                _set_path(raw, parts, value)
            except SpecError as exc:
                raise SpecError(f"--set {item}: {exc}", exc.path, exc.value) from None
        if seed is not None:
            raw["seed"] = seed
        if captures:
            section = raw.setdefault("capture", {})
            if isinstance(section, dict):
                at = section.get("at") or []
                at = list(at) if isinstance(at, list) else [at]
                section["at"] = at + [c for c in captures if c not in at]
        resolved = validate(raw, base)
        sweep = resolved.pop("sweep")
        _check_sweep(raw, sweep, base)
    except SpecError as exc:
        if file is None:
            raise
        raise SpecError(f"{file}: {exc}", exc.path, exc.value) from None
    return Spec(resolved["name"], resolved["seed"], resolved, sweep, raw, base.resolve(), file)


def _point_raw(raw: dict[str, Any], point: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy({k: v for k, v in raw.items() if k != "sweep"})
    for key, value in point.items():
        _set_path(out, key.split("."), copy.deepcopy(value))
    return out


def _check_sweep(raw: dict[str, Any], sweep: dict[str, list[Any]], base: Path) -> None:
    """Each swept value on its own must give a valid spec (combinations: ``expand``)."""
    for key, values in sweep.items():
        if key.split(".")[0] in NOT_SWEEPABLE:
            raise bad(f"sweep.{key}", key, "a key path other than name and sweep.*")
        for i, value in enumerate(values):
            try:
                validate(_point_raw(raw, {key: value}), base)
            except SpecError as exc:
                message = f"sweep.{key}.{i}: {key}={value!r}: {exc}"
                raise SpecError(message, exc.path or f"sweep.{key}", value) from None


# ---- expansion ----------------------------------------------------------------------------


def _short_names(keys: list[str]) -> dict[str, str]:
    """Label names: the last path segment, or the whole path where that is ambiguous."""
    last = [k.rsplit(".", 1)[-1] for k in keys]
    return {k: (n if last.count(n) == 1 else k) for k, n in zip(keys, last, strict=True)}


def _label_value(value: Any, key: str = "") -> str:
    if key == "faults" and isinstance(value, list):  # a fault timeline: its events in order
        events = [
            next((k for k in f if k not in ("at_s", "detect_ms")), "?")
            for f in value
            if isinstance(f, dict)
        ]
        return "+".join(events) or "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, str | int):
        return str(value)
    return json.dumps(value, separators=(",", ":"))


def expand(spec: Spec, repeat: int = 1) -> list[RunSpec]:
    """The runs of ``spec``: the sweep grid's Cartesian product (first key varies
    slowest, values in the order written), each point ``repeat`` times with seeds
    seed..seed+repeat-1 (innermost)."""
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise bad("repeat", repeat, "an integer >= 1")
    keys = list(spec.sweep)
    names = _short_names(keys)
    runs: list[RunSpec] = []
    for values in itertools.product(*(spec.sweep[k] for k in keys)):
        point = dict(zip(keys, values, strict=True))
        shown = [f"{names[k]}={_label_value(v, k)}" for k, v in point.items() if k != "seed"]
        try:
            resolved = validate(_point_raw(spec.raw, point), spec.base_dir)
        except SpecError as exc:
            where = ",".join(shown)
            raise SpecError(f"sweep point {where}: {exc}", exc.path, exc.value) from None
        resolved.pop("sweep")
        for r in range(repeat):
            seed = resolved["seed"] + r
            run = copy.deepcopy(resolved)
            run["seed"] = seed
            label = ",".join([*shown, f"seed={seed}"])
            runs.append(RunSpec(spec.name, len(runs), label, seed, dict(point), run))
    return runs


def spec_sha256(run: RunSpec | Spec) -> str:
    """sha256 of the resolved spec as canonical JSON (keys sorted, no spaces, UTF-8): two
    runs of the same resolved spec have the same hash, whatever their YAML looked like
    (summary.json's and env.json's ``spec_sha256``)."""
    text = json.dumps(
        run.resolved, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
    )
    return hashlib.sha256(text.encode()).hexdigest()


def resolved_yaml(run: RunSpec | Spec) -> str:
    """The resolved spec as YAML (the results' ``spec.yaml``); ``load_spec`` of it gives
    the same resolved spec back."""
    title = run.label if isinstance(run, RunSpec) else run.name
    header = f"# kvfabric resolved spec ({title}): every default filled in\n"
    return header + yaml.safe_dump(
        run.resolved, sort_keys=False, allow_unicode=True, default_flow_style=False
    )


# ---- bundled specs ------------------------------------------------------------------------


def bundled_names() -> list[str]:
    """Names of the specs shipped in ``experiments/specs``."""
    return sorted(p.stem for p in SPECS_DIR.glob("*.yaml"))


def find_bundled(name: str) -> Path:
    """``experiments/specs/<name>.yaml`` (for ``kvfabric run <name>``)."""
    stem = name.removesuffix(".yaml")
    path = SPECS_DIR / f"{stem}.yaml"
    if "/" in stem or not path.is_file():
        raise bad("spec", name, f"a bundled spec: {', '.join(bundled_names())}", "no such spec")
    return path


def locate(argument: str) -> Path:
    """A spec file path as given, or else a bundled spec's name."""
    if Path(argument).is_file():
        return Path(argument)
    if "/" not in argument and not argument.endswith((".yaml", ".yml")):
        return find_bundled(argument)
    raise SpecError(
        f"{argument}: spec file not found (bundled specs: {', '.join(bundled_names())})",
        "",
        argument,
    )
