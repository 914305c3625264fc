"""The building blocks of the spec schema: typed checks that name the key path.

A schema is data: a ``section`` maps each allowed key to a ``Field`` (a check, a
default and one line of doc). Checking a value returns it normalised (integral
floats become ints, numbers become floats, defaults filled in) or raises
``SpecError`` whose message names the key path, the bad value and what is
allowed. Unknown keys are errors.

Every check also carries its JSON Schema (``Check.json``), so the same
declarations give editors a schema (``kvfabric spec schema``) and readers a key
reference (``kvfabric spec keys``). The JSON Schema says what a value's shape
must be; what depends on the fabric (a host's name, a server number) or spans
keys is checked only by kvfabric, and its ``description`` says so.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from topologies import Fabric

REQUIRED: Any = object()
NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9_.-]*"


class SpecError(ValueError):
    """A spec that cannot be honoured. ``path`` is the dotted key path
    (``workloads.0.senders``), ``value`` the offending value when there is one."""

    def __init__(self, message: str, path: str = "", value: Any = None) -> None:
        super().__init__(message)
        self.path = path
        self.value = value


def join(path: str, key: object) -> str:
    return f"{path}.{key}" if path else str(key)


def bad(path: str, value: Any, allowed: str, why: str = "") -> SpecError:
    """The error for ``value`` at ``path``: what is wrong (optional) and what is allowed."""
    reason = f"{why}; " if why else ""
    return SpecError(
        f"{path or '(spec)'}: {value!r} is not allowed: {reason}allowed: {allowed}", path, value
    )


def listing(names: Sequence[object], limit: int = 12) -> str:
    """Names joined for a message, shortened for a large fabric."""
    text = [str(n) for n in names]
    if len(text) <= limit:
        return ", ".join(text)
    return f"{', '.join(text[: limit - 2])}, ..., {', '.join(text[-2:])} ({len(text)} in all)"


@dataclass
class Ctx:
    """What checks may consult: the fabric built so far, the run length, the spec's folder."""

    base_dir: Path
    fabric: Fabric | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def duration_s(self) -> float | None:
        return self.extra.get("duration_s")

    @property
    def hosts(self) -> list[str]:
        return [n.name for n in self.fabric.hosts] if self.fabric else []

    @property
    def servers(self) -> dict[int, list[str]]:
        """Server number -> its GPUs (on spine-leaf and fat-tree every GPU is a server;
        storage nodes are none)."""
        out: dict[int, list[str]] = {}
        for node in self.fabric.gpus if self.fabric else []:
            out.setdefault(node.server if node.server is not None else node.number, []).append(
                node.name
            )
        return out


@dataclass(frozen=True)
class Check:
    """A check: ``fn(value, path, ctx)`` returns the normalised value or raises SpecError.
    ``allowed`` says what passes; ``accepts`` picks the branch of an ``either``; ``json``
    is the JSON Schema of the values that can pass."""

    fn: Callable[[Any, str, Ctx], Any]
    allowed: str
    accepts: Callable[[Any], bool] = lambda value: True
    json: dict[str, Any] = field(default_factory=dict)

    def __call__(self, value: Any, path: str, ctx: Ctx) -> Any:
        return self.fn(value, path, ctx)


@dataclass(frozen=True)
class Derived:
    """A default computed from the section's other (checked) values and the context."""

    fn: Callable[[dict[str, Any], Ctx], Any]


@dataclass(frozen=True)
class Field:
    """One key of a section: what its value must be, its default (``REQUIRED``, a value,
    None or ``Derived``) and one line saying what it means."""

    check: Check
    default: Any = REQUIRED
    doc: str = ""


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def integer(low: int | None = None, high: int | None = None) -> Check:
    """An integer (an integral float such as ``4.0e+9`` is accepted and becomes an int)."""
    if low is not None and high is not None:
        allowed = f"an integer from {low} to {high}"
    else:
        allowed = f"an integer >= {low}" if low is not None else "an integer"

    def fn(value: Any, path: str, ctx: Ctx) -> int:
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)
        ok = isinstance(value, int) and not isinstance(value, bool)
        if not ok or (low is not None and value < low) or (high is not None and value > high):
            raise bad(path, value, allowed)
        return value

    bounds = {"minimum": low, "maximum": high}
    return Check(fn, allowed, _is_number, {"type": "integer", **_given(bounds)})


def number(gt: float | None = None, ge: float | None = None, le: float | None = None) -> Check:
    """A finite number within the bounds, returned as a float."""
    bounds = [f"{op} {b:g}" for op, b in ((">", gt), (">=", ge), ("<=", le)) if b is not None]
    allowed = "a number" + (" " + " and ".join(bounds) if bounds else "")

    def fn(value: Any, path: str, ctx: Ctx) -> float:
        ok = _is_number(value) and math.isfinite(value)
        ok = ok and (gt is None or value > gt) and (ge is None or value >= ge)
        if not ok or (le is not None and value > le):
            raise bad(path, value, allowed)
        return float(value)

    bounds = {"exclusiveMinimum": gt, "minimum": ge, "maximum": le}
    return Check(fn, allowed, _is_number, {"type": "number", **_given(bounds)})


def choice(options: Iterable[str]) -> Check:
    """One of a fixed set of names."""
    names = list(options)
    allowed = f"one of {', '.join(names)}"

    def fn(value: Any, path: str, ctx: Ctx) -> str:
        if not isinstance(value, str) or value not in names:
            raise bad(path, value, allowed)
        return value

    return Check(fn, allowed, lambda v: isinstance(v, str), {"enum": names})


def anything() -> Check:
    return Check(lambda v, p, c: v, "a value to try")


def text(pattern: str | None = None, allowed: str = "a string") -> Check:
    def fn(value: Any, path: str, ctx: Ctx) -> str:
        if not isinstance(value, str) or (pattern and not re.fullmatch(pattern, value)):
            raise bad(path, value, allowed)
        return value

    json = {"type": "string"} | ({"pattern": f"^(?:{pattern})$"} if pattern else {})
    return Check(fn, allowed, lambda v: isinstance(v, str), json)


def name_text() -> Check:
    return text(NAME_PATTERN, "a name of letters, digits, '_', '.', '-'")


def boolean() -> Check:
    def fn(value: Any, path: str, ctx: Ctx) -> bool:
        if not isinstance(value, bool):
            raise bad(path, value, "true or false")
        return value

    return Check(fn, "true or false", lambda v: isinstance(v, bool), {"type": "boolean"})


def optional(check: Check) -> Check:
    """``check`` or null."""
    return Check(
        lambda v, p, c: None if v is None else check(v, p, c),
        f"{check.allowed}, or null",
        lambda v: v is None or check.accepts(v),
        {"anyOf": [check.json, {"type": "null"}]},
    )


def either(*checks: Check) -> Check:
    """The first check whose ``accepts`` takes the value decides (e.g. a count or a list)."""
    allowed = " or ".join(c.allowed for c in checks)

    def fn(value: Any, path: str, ctx: Ctx) -> Any:
        for check in checks:
            if check.accepts(value):
                return check(value, path, ctx)
        raise bad(path, value, allowed)

    return Check(
        fn,
        allowed,
        lambda v: any(c.accepts(v) for c in checks),
        {"anyOf": [c.json for c in checks]},
    )


def list_of(
    item: Check, min_len: int = 0, max_len: int | None = None, distinct: bool = False
) -> Check:
    size = f"{min_len}" if max_len == min_len else f"{min_len} or more"
    size = f"{min_len} to {max_len}" if max_len not in (None, min_len) else size
    allowed = f"a list of {size} {'distinct ' if distinct else ''}items, each {item.allowed}"

    def fn(value: Any, path: str, ctx: Ctx) -> list[Any]:
        if not isinstance(value, list):
            raise bad(path, value, allowed)
        if len(value) < min_len or (max_len is not None and len(value) > max_len):
            raise bad(path, value, allowed, f"{len(value)} items")
        out = [item(v, join(path, i), ctx) for i, v in enumerate(value)]
        if distinct:
            seen: list[Any] = []
            for i, v in enumerate(out):
                if v in seen:
                    raise bad(join(path, i), v, "each item once", "listed twice")
                seen.append(v)
        return out

    json = {"type": "array", "items": item.json, "minItems": min_len}
    json |= _given({"maxItems": max_len}) | ({"uniqueItems": True} if distinct else {})
    return Check(fn, allowed, lambda v: isinstance(v, list), json)


def mapping(key: Check, value: Check) -> Check:
    allowed = f"a mapping of {key.allowed} to {value.allowed}"

    def fn(raw: Any, path: str, ctx: Ctx) -> dict[Any, Any]:
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            raise bad(path, raw, allowed)
        return {key(k, join(path, k), ctx): value(v, join(path, k), ctx) for k, v in raw.items()}

    json = {
        "type": ["object", "null"],
        "propertyNames": key.json,
        "additionalProperties": value.json,
    }
    return Check(fn, allowed, lambda v: isinstance(v, dict), json)


def unknown_keys(raw: dict[Any, Any], allowed: Iterable[str], path: str) -> None:
    names = list(allowed)
    for key in raw:
        if key not in names:
            raise SpecError(
                f"{join(path, key)}: unknown key {key!r}: allowed keys: {', '.join(names)}",
                join(path, key),
                key,
            )


def kind_of(raw: Any, path: str, kinds: Iterable[str], allowed: str) -> str:
    """The ``kind`` of a mapping whose kind picks the schema of its other keys."""
    kinds = list(kinds)
    if not isinstance(raw, dict):
        raise bad(path, raw, allowed)
    if "kind" not in raw:
        raise missing(join(path, "kind"), f"one of {', '.join(kinds)}")
    kind = raw["kind"]
    if not isinstance(kind, str) or kind not in kinds:
        raise bad(join(path, "kind"), kind, f"one of {', '.join(kinds)}")
    return kind


def missing(path: str, allowed: str) -> SpecError:
    return SpecError(f"{path}: missing: required, {allowed}", path)


def section(
    fields: dict[str, Field],
    post: Callable[[dict[str, Any], str, Ctx], dict[str, Any] | None] | None = None,
    *,
    sparse: bool = False,
) -> Check:
    """A mapping with exactly these keys: each checked, absent ones defaulted.

    Defaults other than null are checked like given values, so a nested section's
    default ``{}`` comes back with its own defaults filled in. ``post`` sees the whole
    checked section for rules that span keys. A ``sparse`` section leaves out the keys
    whose value is its default and null, false or 0 (a token distribution names only
    its parameters, a fault only its event); its JSON Schema says so (``x-sparse``) for
    the typed configuration."""
    allowed = f"a mapping with keys {', '.join(fields)}"

    def fn(raw: Any, path: str, ctx: Ctx) -> dict[str, Any]:
        raw = {} if raw is None else raw
        if not isinstance(raw, dict):
            raise bad(path, raw, allowed)
        unknown_keys(raw, fields, path)
        out: dict[str, Any] = {}
        derived = []
        for key, f in fields.items():
            where = join(path, key)
            if key in raw:
                out[key] = f.check(raw[key], where, ctx)
            elif f.default is REQUIRED:
                raise missing(where, f.check.allowed)
            elif isinstance(f.default, Derived):
                derived.append(key)
                out[key] = None  # keeps the key order of the schema
            elif f.default is None:
                out[key] = None
            else:
                out[key] = f.check(copy.deepcopy(f.default), where, ctx)
        for key in derived:
            out[key] = fields[key].default.fn(out, ctx)
        if post is not None:
            out = post(out, path, ctx) or out
        if sparse:
            out = {k: v for k, v in out.items() if not left_out(v, fields[k].default)}
        return out

    json = section_json(fields) | ({"x-sparse": True} if sparse else {})
    return Check(fn, allowed, lambda v: isinstance(v, dict), json)


def left_out(value: Any, default: Any) -> bool:
    """Whether a sparse section leaves ``value`` out: its default, and null, false or 0."""
    return value is None or (value in (False, 0) and value == default)


def section_json(fields: dict[str, Field]) -> dict[str, Any]:
    """The JSON Schema of a section: its keys (each with its doc and plain default), the
    required ones, no other key. A section may be left out or null (all defaults)."""
    props = {}
    for key, f in fields.items():
        prop = dict(f.check.json)
        if f.doc:
            prop["description"] = f.doc
        if f.default is not REQUIRED and not isinstance(f.default, Derived):
            prop["default"] = f.default
        props[key] = prop
    required = [k for k, f in fields.items() if f.default is REQUIRED]
    return {
        "type": ["object", "null"],
        "properties": props,
        "additionalProperties": False,
        **({"required": required} if required else {}),
    }


def kinds_json(kinds: dict[str, Check]) -> dict[str, Any]:
    """The JSON Schema of a mapping whose ``kind`` picks the schema of its other keys."""
    branches = []
    for name, check in kinds.items():
        branch = dict(check.json)
        props = dict(branch.get("properties", {}))
        doc = props.get("kind", {}).get("description")
        props["kind"] = {"const": name, **({"description": doc} if doc else {})}
        branch["properties"] = props
        branch["required"] = sorted(set(branch.get("required", [])) | {"kind"})
        branch["type"] = "object"
        branches.append(branch)
    return {"oneOf": branches}


def _given(values: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


def remember(name: str, check: Check) -> Check:
    """``check``, and keep the result in ``ctx.extra[name]`` for checks that follow."""

    def fn(value: Any, path: str, ctx: Ctx) -> Any:
        ctx.extra[name] = out = check(value, path, ctx)
        return out

    return Check(fn, check.allowed, check.accepts, check.json)


def given_keys(name: str, check: Check) -> Check:
    """``check`` of a section, and keep the keys the spec wrote in it in
    ``ctx.extra[f"{name} given"]``, for rules between a key and another's alias."""

    def fn(value: Any, path: str, ctx: Ctx) -> Any:
        ctx.extra[f"{name} given"] = frozenset(value) if isinstance(value, dict) else frozenset()
        return check(value, path, ctx)

    return Check(fn, check.allowed, check.accepts, check.json)


def divides(path: str, tp: int, whole: int, what: str) -> None:
    """``tp`` must divide ``whole`` (KV heads, GPUs of an instance, hosts of a list)."""
    if whole % tp:
        divisors = [d for d in range(1, whole + 1) if whole % d == 0]
        raise bad(path, tp, f"a divisor of {what} ({whole}): {', '.join(map(str, divisors))}")


# ---- names that must exist in the fabric ------------------------------------------------

# ``title`` says what the name must be (a check against the fabric JSON Schema cannot make).
FABRIC_NAME = {"type": "string", "title": "a host of the fabric"}


def host() -> Check:
    """A host (GPU) of the spec's fabric."""

    def fn(value: Any, path: str, ctx: Ctx) -> str:
        hosts = ctx.hosts
        if not isinstance(value, str) or value not in hosts:
            kind = ctx.fabric.kind if ctx.fabric else "(no)"
            raise bad(path, value, f"a host of this {kind} fabric: {listing(hosts)}")
        return value

    return Check(fn, "a host of the fabric", lambda v: isinstance(v, str), FABRIC_NAME)


def node(kinds: Sequence[str] | None = None, what: str = "a node") -> Check:
    """A node of the fabric, optionally only of the given node kinds."""

    def fn(value: Any, path: str, ctx: Ctx) -> str:
        nodes = ctx.fabric.nodes if ctx.fabric else ()
        names = [n.name for n in nodes if kinds is None or n.kind in kinds]
        if not isinstance(value, str) or value not in names:
            kind = ctx.fabric.kind if ctx.fabric else "(no)"
            raise bad(path, value, f"{what} of this {kind} fabric: {listing(names)}")
        return value

    json = FABRIC_NAME | {"title": f"{what} of the fabric"}
    return Check(fn, f"{what} of the fabric", lambda v: isinstance(v, str), json)


def capture_point() -> Check:
    """A host (its NIC) or switch:port / switch:neighbour of the fabric."""

    def fn(value: Any, path: str, ctx: Ctx) -> str:
        from experiments.spec.capture import targets

        if ctx.fabric is not None:
            try:
                targets(ctx.fabric, [str(value)])
            except ValueError as exc:
                why, _, allowed = str(exc).partition(": ")[2].partition("; allowed: ")
                raise bad(path, value, allowed or why, why if allowed else "") from None
        return str(value)

    json = FABRIC_NAME | {"title": "a host or switch:port of the fabric"}
    return Check(fn, "a host or switch:port of the fabric", lambda v: isinstance(v, str), json)


def server() -> Check:
    """A server number of the fabric (rail-optimized: 0..servers-1; else a host number)."""

    def fn(value: Any, path: str, ctx: Ctx) -> int:
        numbers = sorted(ctx.servers)
        ok = isinstance(value, int) and not isinstance(value, bool) and value in ctx.servers
        if not ok:
            span = f"{numbers[0]}..{numbers[-1]}" if numbers else "none"
            raise bad(path, value, f"a server number of this fabric: {span}")
        return value

    json = {"type": "integer", "minimum": 0, "title": "a server number of the fabric"}
    return Check(fn, "a server number of the fabric", _is_number, json)


def existing_file(what: str = "a file", json: dict[str, Any] | None = None) -> Check:
    """A path to an existing file, relative to the spec file's folder or absolute;
    resolved to an absolute path."""
    allowed = f"{what}: a path relative to the spec file's folder, or absolute"

    def fn(value: Any, path: str, ctx: Ctx) -> str:
        if not isinstance(value, str) or not value:
            raise bad(path, value, allowed)
        file = Path(value).expanduser()
        file = file if file.is_absolute() else ctx.base_dir / file
        if not file.is_file():
            raise bad(path, value, allowed, f"no such file {file}")
        return str(file.resolve())

    return Check(fn, allowed, lambda v: isinstance(v, str), {} if json is None else json)
