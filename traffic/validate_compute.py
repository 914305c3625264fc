"""How well the calibrated compute model reproduces the profiles it came from: the
validation table of docs/concepts/compute.md, as Markdown on stdout.

    python -m traffic.validate_compute

Every number is computed from ``traffic/data/vidur_profiles.json`` and
``traffic.compute``:

- per row, the profiled linear-operator sum at that token count (prefill: prompt
  tokens; decode: batch size), the model's linear part *with that row held out* (fit
  on the profiled counts of the other parity, i.e. its neighbours), the model's whole
  step (linear + attention + collective; decode at 2,048 context tokens per sequence),
  the old roofline at efficiency 0.5 for the same step, and their ratio;
- then, over every (model, GPU, tp) series, the error at every profiled token count
  when the model is fit on every other one.
"""

from __future__ import annotations

import statistics
import sys

from . import compute
from .compute import LinearProfile

DECODE_CONTEXT_PER_SEQUENCE = 2048

ROWS: tuple[tuple[str, str, str, int, int], ...] = (
    ("prefill", "llama-3-8b", "a100", 1, 8192),
    ("prefill", "llama-3-8b", "a100", 4, 8192),
    ("prefill", "llama-3-8b", "a100", 8, 8192),
    ("prefill", "llama-3-70b", "a100", 1, 8192),
    ("prefill", "llama-3-70b", "a100", 4, 8192),
    ("prefill", "llama-3-70b", "a100", 8, 8192),
    ("prefill", "llama-3-70b", "a100", 8, 1000),
    ("prefill", "llama-2-70b", "h100", 4, 3072),
    ("prefill", "qwen-72b", "h100", 8, 2048),
    ("decode", "llama-3-8b", "a100", 1, 32),
    ("decode", "llama-3-8b", "a100", 4, 32),
    ("decode", "llama-3-8b", "a100", 8, 32),
    ("decode", "llama-3-70b", "a100", 4, 64),
)


def _series(model: str, gpu: str, tp: int) -> dict:
    for s in compute._table()["linear"]:
        if (s["model"], s["gpu"], s["tp"]) == (model, gpu, tp):
            return s
    raise KeyError(f"no profile for {model} on {gpu} at tp {tp}")


def _fit(series: dict, keep: list[int]) -> LinearProfile:
    tokens, ms = series["tokens"], series["ms"]
    return LinearProfile(tuple(tokens[i] for i in keep), tuple(ms[i] / 1e3 for i in keep))


def held_out_linear_s(series: dict, tokens: int) -> float:
    """The model's linear time at a profiled ``tokens``, fit on the other parity's rows."""
    i = series["tokens"].index(tokens)
    last = len(series["tokens"]) - 1
    if i in (0, last):
        raise ValueError(f"{tokens} tokens is an end of the profile; it cannot be held out")
    keep = sorted({0, last} | set(range(1 - i % 2, last + 1, 2)))
    return _fit(series, keep).at(tokens)


def every_other_row_errors(series: dict) -> dict[int, float]:
    """Relative error at every row left out when fit on every other row (ends kept)."""
    n = len(series["tokens"])
    keep = sorted(set(range(0, n, 2)) | {n - 1})
    profile = _fit(series, keep)
    return {
        series["tokens"][i]: profile.at(series["tokens"][i]) / (series["ms"][i] / 1e3) - 1
        for i in range(n)
        if i not in set(keep)
    }


def table_rows() -> list[str]:
    head = (
        "| step | model | GPU | tp | tokens / batch | profiled linear | model linear, "
        "row held out | model step | old roofline | roofline ÷ model step |"
    )
    lines = [head, "|---|---|---|---|---|---|---|---|---|---|"]
    for step, model, gpu, tp, n in ROWS:
        series = _series(model, gpu, tp)
        measured = series["ms"][series["tokens"].index(n)]
        held = held_out_linear_s(series, n) * 1e3
        if step == "prefill":
            full = compute.prefill_step(model, gpu, n, tp)
            old = compute.prefill_step(model, gpu, n, tp, roofline=True)
        else:
            context = n * DECODE_CONTEXT_PER_SEQUENCE
            full = compute.decode_step(model, gpu, context, tp, batch=n)
            old = compute.decode_step(model, gpu, context, tp, batch=n, roofline=True)
        lines.append(
            f"| {step} | {model} | {gpu} | {tp} | {n:,} | {measured:,.1f} ms "
            f"| {held:,.1f} ms ({held / measured - 1:+.1%}) | {full.total_s * 1e3:,.1f} ms "
            f"| {old.total_s * 1e3:,.1f} ms | {old.total_s / full.total_s:.2f} |"
        )
    return lines


def summary() -> str:
    errors = [
        (n, abs(e))
        for s in compute._table()["linear"]
        for n, e in every_other_row_errors(s).items()
    ]
    every = [e for _, e in errors]
    large = [e for n, e in errors if n >= 4096]
    return (
        f"Fit on every other profiled token count, over {len(compute._table()['linear'])} "
        f"(model, GPU, tp) series: {len(every):,} held-out counts, median error "
        f"{statistics.median(every):.1%}, {sum(e <= 0.05 for e in every) / len(every):.0%} "
        f"within 5 %, largest {max(every):.1%}; from 4,096 tokens on ({len(large)} counts) "
        f"largest {max(large):.1%}."
    )


def main() -> int:
    print("\n".join(table_rows()))
    print()
    print(summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
