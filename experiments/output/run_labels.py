"""Labels that tell runs apart in a comparison, by what differs between them.

A sweep's runs carry labels of their own (``senders=3,seed=8``) and keep them. Runs of
different experiments, or runs whose labels coincide (two runs of one spec with an
edited key), are labelled instead by the spec keys whose values differ between them,
the experiment first: ``experiment=incast-collapse`` / ``experiment=kv-tiering``, or
``fabric.buffer_pkts=16`` / ``fabric.buffer_pkts=64``. A key is added only when it
tells more runs apart, so a label stays short; runs that nothing tells apart get their
run ids (and one run given twice its place in the list).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from experiments.output.results import Run

__all__ = ["differing_keys", "distinct_labels", "flat_spec", "labelled"]


def flat_spec(spec: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """A spec as dotted keys and their values written as text: ``fabric.buffer_pkts``,
    ``workloads.0.senders``; a list of plain values stays one value (``[4, 4]``)."""
    out: dict[str, str] = {}
    for key, value in spec.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out |= flat_spec(value, f"{name}.")
        elif isinstance(value, list) and any(isinstance(v, Mapping) for v in value):
            out |= flat_spec({str(i): v for i, v in enumerate(value)}, f"{name}.")
        elif isinstance(value, list | bool) or value is None:
            out[name] = json.dumps(value)
        else:
            out[name] = str(value)
    return out


def _described(run: Run) -> dict[str, str]:
    named = run.config.name if run.config is not None else None
    experiment = run.summary.get("experiment") or named or run.path.parent.name
    spec = {k: v for k, v in run.spec.items() if k != "name"}
    return {"experiment": str(experiment), **flat_spec(spec)}


def differing_keys(specs: Sequence[Mapping[str, str]]) -> list[str]:
    """The keys whose values are not the same in every one of ``specs`` (a key one of
    them lacks differs), in the order the first spec that has them lists them."""
    order = list(dict.fromkeys(k for s in specs for k in s))
    return [k for k in order if len({s.get(k) for s in specs}) > 1]


def distinct_labels(runs: Sequence[Run]) -> list[str]:
    """One label per run, never two alike (see the module's docstring)."""
    own = [r.label for r in runs]
    experiments = {_described(r)["experiment"] for r in runs}
    if len(set(own)) == len(own) and len(experiments) == 1:
        return own
    specs = [_described(r) for r in runs]
    chosen: list[str] = []
    for key in differing_keys(specs):
        told = len({tuple(s.get(k) for k in chosen) for s in specs})
        if len({tuple(s.get(k) for k in [*chosen, key]) for s in specs}) > told:
            chosen.append(key)
        if len({tuple(s.get(k) for k in chosen) for s in specs}) == len(specs):
            break
    labels = [", ".join(f"{k}={s.get(k, '–')}" for k in chosen) for s in specs]
    if len(set(labels)) < len(labels):
        labels = [
            f"{label}, run {r.run_id}" if label else f"run {r.run_id}"
            for label, r in zip(labels, runs, strict=True)
        ]
    if len(set(labels)) < len(labels):  # one run given twice
        labels = [f"{label} ({i})" for i, label in enumerate(labels, 1)]
    return labels


def labelled(runs: Sequence[Run]) -> list[Run]:
    """``runs``, each showing its :func:`distinct_labels` label as ``Run.label``."""
    return [
        dataclasses.replace(r, shown_as=label)
        for r, label in zip(runs, distinct_labels(runs), strict=True)
    ]
