"""The typed run configuration, generated from the schema's declarations.

The ``Field`` declarations of ``sections``, ``workloads`` and ``serving`` stay the one
source of every key: its name, check, default and doc. Their JSON Schema (each
``Check.json``) is walked here into the source of ``experiments/spec/config.py``:
one frozen dataclass per section, one per ``kind`` of a workload, fault or fabric,
``tuple`` for lists and read-only mappings for name -> value tables. A unit test
fails when the committed module differs from what this writes
(``kvfabric spec types --out experiments/spec/config.py`` regenerates it).

A section named in ``EXTERNAL`` is a hand-written class with behaviour (``scale`` is
``topologies.scale.Scale``, the one real/emulated conversion); the generator checks
that its fields are the section's keys, in order.
"""

from __future__ import annotations

import dataclasses
import json
import keyword
import textwrap
from dataclasses import dataclass, field
from typing import Any

from experiments.spec.sections import SPEC
from topologies.scale import Scale

# Class names the generator cannot guess well (path -> name). A path is the key path
# with ``[]`` for a list's items and ``[kind]`` for a branch of a kind-picked mapping.
NAMES = {
    "": "RunConfig",
    "controller.qos.classes[]": "QosClass",
    "cluster.servers[]": "ServerAddress",
    "noisy_neighbour[]": "TenantPair",
    "faults[]": "Fault",
    "faults[].link_flap": "LinkFlap",
    "faults[].link_degrade": "LinkDegrade",
    "workloads[][serving].prefill": "Pool",
    "workloads[][serving].dscp": "ServingDscp",
    "workloads[][serving].arrivals(synthetic).synthetic.input_tokens": "Distribution",
}
# List keys whose items are named after the singular of the key.
SINGULAR = {"workloads": "Workload", "faults": "Fault", "servers": "Server"}
# Sections implemented by hand: path -> (module, class).
EXTERNAL: dict[str, tuple[str, type]] = {"scale": ("topologies.scale", Scale)}
SKIPPED_TOP = ("sweep",)  # a run's configuration has its sweep grid expanded

HEADER = '''"""The typed, frozen configuration of one run, generated from the spec schema.

Do not edit: ``kvfabric spec types --out experiments/spec/config.py`` writes this file
from the declarations in ``experiments/spec/`` (a unit test fails when it is stale).
``experiments.spec.typed.config_of(resolved)`` builds a ``RunConfig`` from a resolved
spec; code outside the spec room reads ``config.scale.mtu``, never a string key.
Lists are tuples, name -> value tables read-only mappings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

'''


def camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.replace("-", "_").split("_"))


@dataclass
class ClassDef:
    name: str
    path: str
    doc: str
    sparse: bool = False  # its resolved form leaves out null keys
    fields: list[tuple[str, str, str, str]] = field(default_factory=list)  # name, type, doc, =


@dataclass
class Generator:
    classes: dict[str, ClassDef] = field(default_factory=dict)  # by name, in order
    by_schema: dict[str, str] = field(default_factory=dict)  # one class per shape
    imports: set[str] = field(default_factory=set)

    def class_name(self, path: str, guess: str) -> str:
        name = NAMES.get(path, guess)
        existing = self.classes.get(name)
        if existing is not None and existing.path != path:
            raise ValueError(
                f"two sections would be named {name}: {existing.path} and "
                f"{path}: name one in typegen.NAMES"
            )
        return name

    def section(self, schema: dict[str, Any], path: str, guess: str, doc: str) -> str:
        """The class of an object with properties; returns its name."""
        props: dict[str, Any] = schema["properties"]
        if path in EXTERNAL:
            module, cls = EXTERNAL[path]
            names = [f.name for f in dataclasses.fields(cls)]
            if names != list(props):
                raise ValueError(
                    f"{module}.{cls.__name__} has fields {names}, the schema's "
                    f"{path} section has keys {list(props)}"
                )
            self.imports.add(f"from {module} import {cls.__name__}")
            return cls.__name__
        shape = json.dumps(props, sort_keys=True)
        if shape in self.by_schema:  # the same declaration used at several keys
            return self.by_schema[shape]
        name = self.class_name(path, guess)
        self.by_schema[shape] = name
        cls_def = ClassDef(name, path, doc, sparse=bool(schema.get("x-sparse")))
        self.classes[name] = cls_def  # reserve the name (and the order) before the fields
        for key, sub in props.items():
            if path == "" and key in SKIPPED_TOP:
                continue
            if keyword.iskeyword(key) or not key.isidentifier():
                raise ValueError(f"{path}.{key}: not a Python name")
            where = f"{path}.{key}" if path else key
            tp = self.type_of(sub, where, camel(key))
            default = ""
            if cls_def.sparse:  # a key left out of the resolved spec takes its default
                default = f" = {sub['default']!r}" if "default" in sub else ""
            cls_def.fields.append((key, tp, sub.get("description", ""), default))
        return name

    def type_of(self, schema: dict[str, Any], path: str, guess: str) -> str:
        doc = schema.get("description", "")
        if "const" in schema:
            return f"Literal[{schema['const']!r}]"
        if "enum" in schema:
            return "Literal[" + ", ".join(repr(v) for v in schema["enum"]) + "]"
        if "oneOf" in schema:  # a mapping whose kind picks its keys
            arms = []
            for branch in schema["oneOf"]:
                kind = branch["properties"]["kind"]["const"]
                about = branch["properties"]["kind"].get("description", doc)
                arms.append(self.section(branch, f"{path}[{kind}]", camel(kind) + guess, about))
            return " | ".join(dict.fromkeys(arms))
        if "anyOf" in schema:
            sections = [b for b in schema["anyOf"] if "properties" in b]
            arms = []
            for branch in schema["anyOf"]:
                if branch in sections and len(sections) > 1:  # told apart by their keys
                    first = next(iter(branch["properties"]))
                    name = camel(first) + guess
                    arms.append(self.section(branch, f"{path}({first})", name, doc))
                else:
                    arms.append(self.type_of(branch, path, guess))
            return " | ".join(dict.fromkeys(arms))
        kind = schema.get("type")
        kinds = kind if isinstance(kind, list) else [kind]
        if "properties" in schema:
            return self.section(schema, path, guess, doc)
        if "object" in kinds or "additionalProperties" in schema:
            value = schema.get("additionalProperties")
            inner = self.type_of(value, f"{path}{{}}", guess) if isinstance(value, dict) else "Any"
            return f"Mapping[str, {inner}]"
        if "array" in kinds:
            item = schema.get("items")
            singular = SINGULAR.get(path.rsplit(".", 1)[-1], guess)
            inner = self.type_of(item, f"{path}[]", singular) if isinstance(item, dict) else "Any"
            return f"tuple[{inner}, ...]"
        simple = {
            "integer": "int",
            "number": "float",
            "string": "str",
            "boolean": "bool",
            "null": "None",
        }
        if kind in simple:
            return simple[kind]
        return "Any"


def config_source() -> str:
    """The source of ``experiments/spec/config.py``."""
    gen = Generator()
    gen.section(SPEC.json, "", "RunConfig", "One run's complete configuration.")
    lines = [HEADER.rstrip("\n"), ""]
    lines += sorted(gen.imports)
    for cls_def in gen.classes.values():
        lines += ["", "", "@dataclass(frozen=True)", f"class {cls_def.name}:"]
        where = f"``{cls_def.path}``" if cls_def.path else "the whole spec"
        doc = f"{cls_def.doc.rstrip('.')} ({where})." if cls_def.doc else f"{where}."
        wrapped = textwrap.wrap(doc, 92)
        if len(wrapped) == 1:
            lines.append(f'    """{wrapped[0]}"""')
        else:
            lines += [f'    """{wrapped[0]}'] + [f"    {w}" for w in wrapped[1:]] + ['    """']
        lines.append("")
        for key, tp, key_doc, default in cls_def.fields:
            line = f"    {key}: {tp}{default}"
            lines += [f"    # {text}" for text in textwrap.wrap(key_doc, 94)]
            lines.append(line)
    lines += ["", "", "SECTIONS = ("] + [f"    {name}," for name in gen.classes] + [")"]
    sparse = [c.name for c in gen.classes.values() if c.sparse]
    lines += ["# sections whose resolved form leaves out keys at their default (null, false, 0)"]
    lines += ["SPARSE = ("] + [f"    {name}," for name in sparse] + [")"]
    return "\n".join(lines) + "\n"
