"""Request-arrival traces for the serving emulation: public trace readers and a generator.

Every reader returns the same table, so the router and the prefix-cache pool never care
where requests came from:

    arrival_ms     float, milliseconds from the trace start (its earliest request),
                   after the window is re-based and inter-arrival times divided by speedup
    input_tokens   int >= 1, prompt tokens (after token_scale)
    output_tokens  int >= 1, generated tokens (after token_scale)
    hash_ids       list[int], one id per 512-token prompt block (Mooncake semantics: equal
                   ids across requests are the same reusable KV prefix); empty when the
                   trace carries none, so no prefix reuse is invented

Formats (see ``../shared/data/azure-llm-inference-2023/README.md``):
Mooncake JSONL, the Azure LLM inference CSV and the BurstGPT CSV. A file that is missing or
cannot be parsed raises :class:`TraceError` naming the file and line, before any fabric is
built.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Protocol

import numpy as np
import pandas as pd

from .peaky import peaky_times

BLOCK_TOKENS = 512
COLUMNS = ["arrival_ms", "input_tokens", "output_tokens", "hash_ids"]
FORMATS = ("mooncake", "azure", "burstgpt")
PATTERNS = ("poisson", "bursty", "peaky")  # synthetic arrival processes

_DATA_DIR = Path(__file__).resolve().parent / "data"
_AZURE_TS = re.compile(
    r"^(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?\s*(Z|[+-]\d{2}:?\d{2})?$"
)


class TraceError(ValueError):
    """A trace file that is missing or malformed; the message names the file and line."""


@dataclass(frozen=True)
class _Row:
    t_ns: int
    input_tokens: int
    output_tokens: int
    hash_ids: list[int]


def bundled_azure_trace() -> Path:
    """Path of the bundled first 2,000 requests of the Azure 2023 conversation trace.

    Bundled because users who clone the project have no ``../shared`` directory; see
    ``traffic/data/README.md`` for source, licence (CC-BY 4.0) and the required credit.
    """
    return _DATA_DIR / "azure_conv_2023_head2000.csv"


def read_trace(path: str | Path, fmt: str, **options: float | int | None) -> pd.DataFrame:
    """Read a trace of format ``mooncake``, ``azure`` or ``burstgpt``, the spec's
    ``arrivals.format``; options as in :func:`read_mooncake`."""
    readers: dict[str, Callable[..., pd.DataFrame]] = {
        "mooncake": read_mooncake,
        "azure": read_azure,
        "burstgpt": read_burstgpt,
    }
    if fmt not in readers:
        raise ValueError(f"unknown trace format {fmt!r}; allowed: {', '.join(FORMATS)}")
    return readers[fmt](path, **options)


def read_mooncake(
    path: str | Path,
    *,
    speedup: float = 1.0,
    limit: int | None = None,
    start_s: float = 0.0,
    window_s: float | None = None,
    token_scale: float = 1.0,
) -> pd.DataFrame:
    """Read a Mooncake JSONL trace: one ``{timestamp, input_length, output_length, hash_ids}``
    object per line, timestamp in integer ms. Blank lines are skipped.

    Options: ``speedup`` divides inter-arrival times; ``start_s``/``window_s`` keep the
    requests arriving in ``[start_s, start_s + window_s)`` seconds of trace time and re-base
    that window to 0; ``limit`` keeps the first N of them; ``token_scale`` multiplies token
    counts (rounded, at least 1) and trims hash_ids to the blocks the scaled prompt still has.
    """
    rows = []
    for lineno, line in _lines(path):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TraceError(f"{where}: not valid JSON ({exc.msg})") from None
        if not isinstance(obj, dict):
            raise TraceError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        missing = [k for k in ("timestamp", "input_length", "output_length") if k not in obj]
        if missing:
            raise TraceError(f"{where}: missing key(s) {', '.join(missing)}")
        t_ms = _number(obj["timestamp"], "timestamp", where)
        hash_ids = obj.get("hash_ids", [])
        if not isinstance(hash_ids, list) or not all(
            isinstance(h, int) and not isinstance(h, bool) for h in hash_ids
        ):
            raise TraceError(f"{where}: hash_ids must be a list of integers, got {hash_ids!r}")
        rows.append(
            _Row(
                t_ns=round(t_ms * 1e6),
                input_tokens=_count(obj["input_length"], "input_length", where),
                output_tokens=_count(obj["output_length"], "output_length", where),
                hash_ids=list(hash_ids),
            )
        )
    return _finish(path, rows, speedup, limit, start_s, window_s, token_scale)


def read_azure(
    path: str | Path,
    *,
    speedup: float = 1.0,
    limit: int | None = None,
    start_s: float = 0.0,
    window_s: float | None = None,
    token_scale: float = 1.0,
) -> pd.DataFrame:
    """Read an Azure LLM inference CSV (``TIMESTAMP,ContextTokens,GeneratedTokens``).

    Timestamps like ``2023-11-16 18:15:46.6805900`` carry 7 fractional digits, more than
    ``datetime`` parses, so they are read exactly to the nanosecond here. The trace has no
    block hashes, so hash_ids are empty (no prefix reuse). Options as in :func:`read_mooncake`.
    """
    rows = []
    for where, rec in _csv_records(path, ("TIMESTAMP", "ContextTokens", "GeneratedTokens")):
        rows.append(
            _Row(
                t_ns=_azure_timestamp_ns(rec["TIMESTAMP"], where),
                input_tokens=_count(rec["ContextTokens"], "ContextTokens", where),
                output_tokens=_count(rec["GeneratedTokens"], "GeneratedTokens", where),
                hash_ids=[],
            )
        )
    return _finish(path, rows, speedup, limit, start_s, window_s, token_scale)


def read_burstgpt(
    path: str | Path,
    *,
    speedup: float = 1.0,
    limit: int | None = None,
    start_s: float = 0.0,
    window_s: float | None = None,
    token_scale: float = 1.0,
) -> pd.DataFrame:
    """Read a BurstGPT CSV (``Timestamp`` seconds from start, ``Request tokens``,
    ``Response tokens``; ``Model``, ``Total tokens`` and ``Log Type`` are not needed).

    BurstGPT logs failed requests with 0 response tokens; they are kept (as 1 token, the
    minimum a served request can produce) so that the offered load matches the trace.
    No block hashes, so hash_ids are empty. Options as in :func:`read_mooncake`.
    """
    rows = []
    for where, rec in _csv_records(path, ("Timestamp", "Request tokens", "Response tokens")):
        rows.append(
            _Row(
                t_ns=round(_number(rec["Timestamp"], "Timestamp", where) * 1e9),
                input_tokens=_count(rec["Request tokens"], "Request tokens", where),
                output_tokens=_count(rec["Response tokens"], "Response tokens", where),
                hash_ids=[],
            )
        )
    return _finish(path, rows, speedup, limit, start_s, window_s, token_scale)


# --- synthetic arrivals ---------------------------------------------------------------------


DIST_FIELDS = ("value", "low", "high", "mean", "sigma")


class DistributionLike(Protocol):
    """A ``Distribution`` of the run's configuration (``experiments.spec.config``): a
    ``dist`` and the parameters it takes, the others None."""

    dist: str
    value: int | None
    low: int | None
    high: int | None
    mean: float | None
    sigma: float | None


def is_distribution(spec: object) -> bool:
    """Whether ``spec`` is a configuration's ``Distribution`` (read by attribute)."""
    return hasattr(spec, "dist") and all(hasattr(spec, k) for k in DIST_FIELDS)


@dataclass(frozen=True)
class TokenDist:
    """A token-length distribution: ``fixed`` (value), ``uniform`` (low..high inclusive) or
    ``lognormal`` (mean, sigma of the underlying normal; heavy-tailed like real prompts)."""

    kind: str = "fixed"
    value: int = 512
    low: int = 1
    high: int = 1
    mean: float = 512.0
    sigma: float = 1.0

    @classmethod
    def parse(cls, spec: int | Mapping[str, float] | DistributionLike | TokenDist) -> TokenDist:
        """Accept an int (fixed), a mapping like ``{"dist": "lognormal", "mean": 1000}``,
        a ``Distribution`` of the run's configuration (its fields left unset are None),
        or a TokenDist, and validate it."""
        if isinstance(spec, TokenDist):
            dist = spec
        elif is_distribution(spec):
            given = {k: getattr(spec, k) for k in ("dist", *DIST_FIELDS)}
            return cls.parse({k: v for k, v in given.items() if v is not None})
        elif isinstance(spec, int | np.integer) and not isinstance(spec, bool):
            dist = cls("fixed", value=int(spec))
        elif isinstance(spec, Mapping):
            fields = {k: v for k, v in spec.items() if k != "dist"}
            unknown = set(fields) - set(DIST_FIELDS)
            if unknown:
                raise ValueError(f"unknown token distribution key(s): {sorted(unknown)}")
            ints = {k: int(v) for k, v in fields.items() if k in ("value", "low", "high")}
            floats = {k: float(v) for k, v in fields.items() if k in ("mean", "sigma")}
            dist = cls(str(spec.get("dist", "fixed")), **ints, **floats)
        else:
            raise ValueError(f"token distribution must be an int or a mapping, got {spec!r}")
        dist._check()
        return dist

    def _check(self) -> None:
        if self.kind == "fixed" and self.value < 1:
            raise ValueError(f"fixed token count must be >= 1, got {self.value}")
        if self.kind == "uniform" and not 1 <= self.low <= self.high:
            raise ValueError(f"uniform needs 1 <= low <= high, got {self.low}..{self.high}")
        if self.kind == "lognormal" and (self.mean < 1 or self.sigma < 0):
            raise ValueError(f"lognormal needs mean >= 1, sigma >= 0, got {self}")
        if self.kind not in ("fixed", "uniform", "lognormal"):
            raise ValueError(
                f"unknown distribution {self.kind!r}; allowed: fixed, uniform, lognormal"
            )

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Draw n token counts (int, >= 1)."""
        if self.kind == "fixed":
            return np.full(n, self.value, dtype=np.int64)
        if self.kind == "uniform":
            return rng.integers(self.low, self.high, endpoint=True, size=n)
        # E[exp(N(mu, s^2))] = exp(mu + s^2/2), so mu is chosen to give the requested mean.
        mu = math.log(self.mean) - self.sigma**2 / 2
        return np.maximum(1, np.rint(rng.lognormal(mu, self.sigma, size=n))).astype(np.int64)


def synthetic_arrivals(
    rng: np.random.Generator | int,
    *,
    n: int | None = None,
    duration_s: float | None = None,
    rate_per_s: float,
    pattern: str = "poisson",
    on_s: float = 1.0,
    off_s: float = 1.0,
    input_tokens: int | Mapping[str, float] | DistributionLike | TokenDist = 512,
    output_tokens: int | Mapping[str, float] | DistributionLike | TokenDist = 128,
    shared_prefix_blocks: int = 0,
    n_prefixes: int = 1,
    peak_second_share: float = 0.18,
    window_s: float | None = None,
) -> pd.DataFrame:
    """Generate requests in the trace table shape, deterministic given the seed/rng.

    ``pattern="poisson"``: exponential inter-arrivals at ``rate_per_s``. ``pattern="bursty"``:
    Poisson arrivals only during ``on_s`` periods separated by silent ``off_s`` periods;
    ``rate_per_s`` stays the *mean* rate (the on-period rate is raised by
    (on_s + off_s) / on_s) so a bursty run offers the same load as a Poisson one.
    ``pattern="peaky"``: production burstiness, the busiest second of every ``window_s``
    (default: the arrival span, the shorter of ``duration_s`` and ``n / rate_per_s``) absorbs
    ``peak_second_share`` of its requests, at the same mean rate (``traffic.peaky``).
    Stops after ``n`` requests or at ``duration_s``, whichever comes first (at least one
    is required).

    With ``shared_prefix_blocks > 0`` every request gets hash_ids for all its 512-token
    blocks: the first ``shared_prefix_blocks`` come from one of ``n_prefixes`` shared
    prefixes (a system prompt, a document), chosen uniformly, the rest are unique, so the
    prefix-cache pool sees reuse exactly where a real deployment would. Otherwise hash_ids
    are empty.
    """
    if n is None and duration_s is None:
        raise ValueError("synthetic_arrivals needs n or duration_s")
    if rate_per_s <= 0:
        raise ValueError(f"rate_per_s must be > 0, got {rate_per_s}")
    if pattern not in PATTERNS:
        raise ValueError(f"unknown arrival pattern {pattern!r}; allowed: {', '.join(PATTERNS)}")
    if pattern == "bursty" and (on_s <= 0 or off_s < 0):
        raise ValueError(f"bursty needs on_s > 0 and off_s >= 0, got {on_s}, {off_s}")
    if shared_prefix_blocks < 0 or n_prefixes < 1:
        raise ValueError("shared_prefix_blocks must be >= 0 and n_prefixes >= 1")
    rng = np.random.default_rng(rng) if not isinstance(rng, np.random.Generator) else rng
    in_dist, out_dist = TokenDist.parse(input_tokens), TokenDist.parse(output_tokens)

    if pattern == "peaky":
        spans = [s for s in (duration_s, n and n / rate_per_s) if s is not None]
        window = window_s if window_s is not None else min(spans)
        times_s = peaky_times(rng, rate_per_s, n, duration_s, peak_second_share, window)
    else:
        busy_rate = rate_per_s * ((on_s + off_s) / on_s if pattern == "bursty" else 1.0)
        times_s = _poisson_times(rng, busy_rate, n, duration_s, on_s, off_s, pattern)
    count = len(times_s)
    ins = in_dist.sample(rng, count)
    outs = out_dist.sample(rng, count)
    hash_ids: list[list[int]] = [[] for _ in range(count)]
    if shared_prefix_blocks > 0:
        prefixes = rng.integers(0, n_prefixes, size=count)
        next_unique = n_prefixes * shared_prefix_blocks
        for i in range(count):
            blocks = math.ceil(int(ins[i]) / BLOCK_TOKENS)
            shared = min(shared_prefix_blocks, blocks)
            first = int(prefixes[i]) * shared_prefix_blocks
            unique = blocks - shared
            hash_ids[i] = list(range(first, first + shared)) + list(
                range(next_unique, next_unique + unique)
            )
            next_unique += unique
    return pd.DataFrame(
        {
            "arrival_ms": np.asarray(times_s, dtype=float) * 1e3,
            "input_tokens": ins.astype(np.int64),
            "output_tokens": outs.astype(np.int64),
            "hash_ids": pd.Series(hash_ids, dtype=object),
        },
        columns=COLUMNS,
    )


def _poisson_times(
    rng: np.random.Generator,
    rate: float,
    n: int | None,
    duration_s: float | None,
    on_s: float,
    off_s: float,
    pattern: str,
) -> np.ndarray:
    """Arrival times (s). Bursty arrivals are a Poisson process in "on time" mapped to wall
    time by inserting an off period after every on_s of it."""
    out: list[float] = []
    busy_t = 0.0
    while n is None or len(out) < n:
        busy_t += rng.exponential(1.0 / rate)
        t = busy_t
        if pattern == "bursty":
            cycles = math.floor(busy_t / on_s)
            t = cycles * (on_s + off_s) + (busy_t - cycles * on_s)
        if duration_s is not None and t >= duration_s:
            break
        out.append(t)
    return np.asarray(out, dtype=float)


# --- shared parsing helpers -----------------------------------------------------------------


def _lines(path: str | Path) -> Iterator[tuple[int, str]]:
    p = Path(path)
    if not p.is_file():
        raise TraceError(f"trace file not found: {p}")
    try:
        with p.open(encoding="utf-8-sig") as fh:
            yield from enumerate(fh, start=1)
    except UnicodeDecodeError as exc:
        raise TraceError(f"{p}: not UTF-8 text ({exc.reason})") from None


def _csv_records(path: str | Path, needed: tuple[str, ...]) -> Iterator[tuple[str, dict[str, str]]]:
    """Yield (``file:line``, row dict) for each non-blank data row, after checking the header."""
    reader = csv.reader(line for _, line in _lines(path))
    header = next(reader, None)
    if header is None:
        raise TraceError(f"{path}: empty file, expected a header with {', '.join(needed)}")
    header = [h.strip() for h in header]
    missing = [c for c in needed if c not in header]
    if missing:
        raise TraceError(f"{path}:1: header lacks column(s) {', '.join(missing)}; got {header}")
    for rec in reader:
        where = f"{path}:{reader.line_num}"
        if not rec or all(not f.strip() for f in rec):
            continue
        if len(rec) != len(header):
            raise TraceError(f"{where}: expected {len(header)} fields, got {len(rec)}: {rec}")
        yield where, dict(zip(header, (f.strip() for f in rec), strict=True))


def _number(value: object, name: str, where: str) -> float:
    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise TraceError(f"{where}: {name} is not a number: {value!r}") from None
    if isinstance(value, bool) or not math.isfinite(x) or x < 0:
        raise TraceError(f"{where}: {name} must be a finite number >= 0, got {value!r}")
    return x


def _count(value: object, name: str, where: str) -> int:
    x = _number(value, name, where)
    if x != int(x):
        raise TraceError(f"{where}: {name} must be a whole number of tokens, got {value!r}")
    return int(x)


def _azure_timestamp_ns(text: str, where: str) -> int:
    m = _AZURE_TS.match(text)
    if not m:
        raise TraceError(f"{where}: TIMESTAMP {text!r} is not like 'YYYY-MM-DD HH:MM:SS.fffffff'")
    date, clock, frac, tz = m.groups()
    try:
        dt = datetime.fromisoformat(f"{date}T{clock}")
    except ValueError as exc:
        raise TraceError(f"{where}: TIMESTAMP {text!r}: {exc}") from None
    if tz and tz != "Z":
        sign = 1 if tz[0] == "+" else -1
        hh, mm = int(tz[1:3]), int(tz[-2:])
        dt -= sign * timedelta(hours=hh, minutes=mm)
    secs = int(dt.replace(tzinfo=UTC).timestamp())
    return secs * 1_000_000_000 + int((frac or "0").ljust(9, "0"))


def _finish(
    path: str | Path,
    rows: list[_Row],
    speedup: float,
    limit: int | None,
    start_s: float,
    window_s: float | None,
    token_scale: float,
) -> pd.DataFrame:
    """Sort, window, limit, speed up and scale parsed rows into the trace table."""
    if not speedup > 0:
        raise ValueError(f"speedup must be > 0, got {speedup}")
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    if start_s < 0 or (window_s is not None and window_s <= 0):
        raise ValueError(f"need start_s >= 0 and window_s > 0, got {start_s}, {window_s}")
    if not token_scale > 0:
        raise ValueError(f"token_scale must be > 0, got {token_scale}")
    if not rows:
        raise TraceError(f"{path}: trace has no requests")
    rows = sorted(rows, key=lambda r: r.t_ns)  # stable: equal timestamps keep file order
    t0 = rows[0].t_ns + round(start_s * 1e9)
    t1 = None if window_s is None else t0 + round(window_s * 1e9)
    kept = [r for r in rows if r.t_ns >= t0 and (t1 is None or r.t_ns < t1)][:limit]
    if not kept:
        span_s = (rows[-1].t_ns - rows[0].t_ns) / 1e9
        raise TraceError(
            f"{path}: no requests in window start_s={start_s}, window_s={window_s} "
            f"(trace spans {span_s:.3f} s)"
        )
    ins = [max(1, round(r.input_tokens * token_scale)) for r in kept]
    outs = [max(1, round(r.output_tokens * token_scale)) for r in kept]
    hashes = [r.hash_ids for r in kept]
    if token_scale < 1:  # a shrunk prompt has fewer 512-token blocks: keep the ids it still has
        hashes = [h[: math.ceil(i / BLOCK_TOKENS)] for h, i in zip(hashes, ins, strict=True)]
    return pd.DataFrame(
        {
            "arrival_ms": [(r.t_ns - t0) / 1e6 / speedup for r in kept],
            "input_tokens": np.asarray(ins, dtype=np.int64),
            "output_tokens": np.asarray(outs, dtype=np.int64),
            "hash_ids": pd.Series(hashes, dtype=object),
        },
        columns=COLUMNS,
    )
