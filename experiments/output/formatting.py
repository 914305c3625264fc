"""Text of the reports: numbers and table cells as report.md shows them, and the notes
every report shares. Pure; the bottom of the report modules (``report``, ``comparison``,
``fault_report`` and ``metric_rows`` build on it)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from experiments.analysis.metrics.stats import percentile_supported

__all__ = [
    "at_path",
    "cell",
    "estimate_cell",
    "fmt",
    "kv",
    "percentile_cell",
    "revision_text",
    "short_label",
    "slug",
    "too_small",
    "units_note",
    "verdict_word",
    "write_text",
]


def verdict_word(fid: Any) -> str:
    if not isinstance(fid, dict) or "ok" not in fid:
        return "not judged"
    return "OK" if fid.get("ok") else "NOT OK"


def at_path(m: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(m, dict):
            return None
        m = m.get(key)
    return m


def short_label(label: str) -> str:
    return label.split(" (")[0]


def slug(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in text.lower()).strip("_")


def fmt(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "–"
        if value != 0 and (abs(value) >= 1e6 or abs(value) < 1e-3):
            return f"{value:.3e}"
        return f"{value:,.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
    return cell(str(value))


def too_small(n: int) -> str:
    return f"n too small (n={n:,})"


def percentile_cell(stats: Any, key: str) -> str:
    """Percentile ``key`` of a stats block as a report shows it: the number when the
    block's ``count`` supports it (``stats.percentile_supported``), else "n too small
    (n=K)"."""
    if not isinstance(stats, dict):
        return fmt(None)
    n = stats.get("count")
    if isinstance(n, int) and not percentile_supported(key, n):
        return too_small(n)
    return fmt(stats.get(key))


def cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def kv(d: dict[str, Any], limit: int = 300) -> str:
    parts = []
    for k, v in d.items():
        shown = v if isinstance(v, str | int | float | bool) or v is None else json.dumps(v)
        parts.append(f"{k}={shown}")
    text = ", ".join(parts)
    return cell(text if len(text) <= limit else text[: limit - 1] + "…")


SHORT_REVISION = 12  # hex digits of a git revision where a person reads it


def revision_text(provenance: Any) -> str:
    """``kvfabric 0.1.0, git 1a2b3c4d5e6f (uncommitted changes)`` from a provenance
    block (summary.json's ``provenance``; ``experiments.orchestration.provenance``)."""
    if not isinstance(provenance, dict):
        return "kvfabric (version and git revision not recorded)"
    version, revision = provenance.get("kvfabric_version"), provenance.get("git_revision")
    text = f"kvfabric {version or '(version unknown)'}, "
    if not revision:
        return text + "git revision unknown"
    dirty = provenance.get("git_dirty")
    state = " (uncommitted changes)" if dirty else "" if dirty is False else " (dirty unknown)"
    return text + f"git {str(revision)[:SHORT_REVISION]}{state}"


def write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def units_note(scale: float | None, dilation: float = 1) -> str:
    """The headline's sentence on units; ``dilation``: the runs' time dilation d (0 when
    runs side by side differ in it)."""
    if scale is None:
        return "Times as measured." if dilation == 1 else "Times in real-equivalent seconds."
    if dilation == 1:
        return (
            f"Real-equivalent units: message bytes and link rates both run at {scale:g} of "
            "the real ones, so times are as measured and rates are emulated ÷ scale."
        )
    slower = (
        f"the emulation ran {dilation:g} times slower (time dilation {dilation:g}: links at "
        f"{scale:g} ÷ {dilation:g} of the real rates), so times are the wall times ÷ {dilation:g}"
        if dilation
        else "the runs ran at different time dilations, each time converted from its wall "
        "clock ÷ its d"
    )
    return (
        f"Real-equivalent units: message bytes run at {scale:g} of the real ones and "
        f"{slower}; rates are per real-equivalent second, emulated ÷ scale."
    )


def estimate_cell(est: dict[str, float]) -> str:
    if "value" in est:
        return fmt(est["value"])
    if "p50" in est or "p99" in est:
        return f"p50 {fmt(est.get('p50'))} · p99 {fmt(est.get('p99'))}"
    return "–"
