"""A resolved spec as its typed, frozen ``RunConfig``, and back.

``config_of(resolved)`` walks the generated classes of ``experiments.spec.config``
by their type hints: a section's keys must be the class's fields (a stale
``config.py`` fails here, not later), a list becomes a tuple, a name -> value table a
read-only mapping, and a union is told apart by ``kind`` or by its keys.
``resolved_of(config)`` gives the plain resolved spec back (what ``spec.yaml`` holds),
so ``resolved_of(config_of(r)) == r``.
"""

from __future__ import annotations

import copy
import dataclasses
import types
import typing
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any, Literal, Union

from experiments.spec import config as generated
from experiments.spec.config import RunConfig
from experiments.spec.schema import Ctx, left_out
from experiments.spec.sections import SPEC_FIELDS, build_fabric
from topologies import Fabric

__all__ = ["ConfigError", "RunConfig", "config_of", "default_section", "fabric_of", "resolved_of"]


class ConfigError(TypeError):
    """A resolved spec that does not fit the generated classes: ``config.py`` is stale
    (regenerate it) or the value was not resolved by the schema."""


@cache
def _hints(cls: type) -> dict[str, Any]:
    namespace = vars(generated) | {"Mapping": Mapping}
    return typing.get_type_hints(cls, globalns=namespace)


def _arms(tp: Any) -> tuple[Any, ...]:
    origin = typing.get_origin(tp)
    return typing.get_args(tp) if origin in (Union, types.UnionType) else (tp,)


def _fits_exactly(tp: Any, value: Any) -> bool:
    """Whether ``value`` is, as it stands, of the simple type ``tp`` (no conversion)."""
    if tp is type(None):
        return value is None
    if tp is bool:
        return isinstance(value, bool)
    if tp in (int, float, str):
        return isinstance(value, tp) and not isinstance(value, bool)
    if typing.get_origin(tp) is Literal:
        return value in typing.get_args(tp) and not isinstance(value, bool)
    return False


def _section_fits(cls: type, value: Any) -> bool:
    if not isinstance(value, Mapping):
        return False
    hints = _hints(cls)
    kind = hints.get("kind")
    if kind is not None and typing.get_origin(kind) is Literal:
        return value.get("kind") in typing.get_args(kind)
    names = {f.name for f in dataclasses.fields(cls)}
    return set(value) <= names if cls in generated.SPARSE else set(value) == names


def _build(tp: Any, value: Any, path: str) -> Any:
    arms = _arms(tp)
    if len(arms) > 1:
        for arm in arms:  # an exact simple match first: 5 stays an int beside float
            if _fits_exactly(arm, value):
                return value
        for arm in arms:
            if dataclasses.is_dataclass(arm) and _section_fits(arm, value):
                return _build(arm, value, path)
        for arm in arms:
            if not dataclasses.is_dataclass(arm):
                try:
                    return _build(arm, value, path)
                except ConfigError:
                    continue
        raise ConfigError(f"{path or '(spec)'}: {value!r} fits none of {tp}")
    if tp is Any:
        return _freeze(value)
    if dataclasses.is_dataclass(tp):
        return _section(tp, value, path)
    origin = typing.get_origin(tp)
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{path}: {value!r} is not a list")
        item = typing.get_args(tp)[0]
        return tuple(_build(item, v, f"{path}.{i}") for i, v in enumerate(value))
    if origin is Mapping:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{path}: {value!r} is not a mapping")
        item = typing.get_args(tp)[1]
        return types.MappingProxyType({k: _build(item, v, f"{path}.{k}") for k, v in value.items()})
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if _fits_exactly(tp, value):
        return value
    raise ConfigError(f"{path or '(spec)'}: {value!r} is not {getattr(tp, '__name__', tp)}")


def _section(cls: type, value: Any, path: str) -> Any:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{path or '(spec)'}: {value!r} is not a section")
    names = [f.name for f in dataclasses.fields(cls)]
    if cls in generated.SPARSE:  # a key left out takes its default
        value = {f.name: value.get(f.name, f.default) for f in dataclasses.fields(cls)}
    if set(value) != set(names):
        extra, missing = sorted(set(value) - set(names)), sorted(set(names) - set(value))
        raise ConfigError(
            f"{path or '(spec)'}: keys do not match {cls.__name__} (unknown: "
            f"{extra or 'none'}; missing: {missing or 'none'}): regenerate "
            "experiments/spec/config.py (kvfabric spec types)"
        )
    hints = _hints(cls)
    return cls(**{k: _build(hints[k], value[k], f"{path}.{k}" if path else k) for k in names})


def _freeze(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, Mapping):
        return types.MappingProxyType({k: _freeze(v) for k, v in value.items()})
    return value


def config_of(resolved: Mapping[str, Any]) -> RunConfig:
    """The typed configuration of a resolved spec (its sweep grid, if still there, is
    left out: a run's configuration has it expanded)."""
    return _section(RunConfig, {k: v for k, v in resolved.items() if k != "sweep"}, "")


def resolved_of(config: Any) -> Any:
    """The plain data of a configuration (or of any section of one): dicts, lists and
    scalars, as the resolved spec and ``spec.yaml`` hold them."""
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        out = {f.name: resolved_of(getattr(config, f.name)) for f in dataclasses.fields(config)}
        if type(config) in generated.SPARSE:
            defaults = {f.name: f.default for f in dataclasses.fields(config)}
            return {k: v for k, v in out.items() if not left_out(v, defaults[k])}
        return out
    if isinstance(config, tuple):
        return [resolved_of(v) for v in config]
    if isinstance(config, Mapping):
        return {k: resolved_of(v) for k, v in config.items()}
    return config


def fabric_of(config: RunConfig) -> Fabric:
    """The ``Fabric`` of a run's configuration (cached: fabrics are immutable)."""
    return build_fabric(resolved_of(config.fabric))


def default_section(key: str) -> Any:
    """The typed section a spec gets when it leaves top-level section ``key`` out
    (``default_section("fidelity")``): its defaults as the schema declares them, so code
    that needs them outside a run does not declare them again."""
    field = SPEC_FIELDS[key]
    raw = copy.deepcopy(field.default)
    resolved = field.check(raw, key, Ctx(base_dir=Path.cwd()))
    return _build(_hints(RunConfig)[key], resolved, key)
