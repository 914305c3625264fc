"""The GPU profile table behind ``traffic.compute``, and the command that derives it.

``traffic/data/vidur_profiles.json`` is derived from the operator profiles Vidur
publishes (https://github.com/microsoft/vidur, MIT licence, ``LICENSE-vidur`` beside
the table): ``data/profiling/compute/<gpu>/<org>/<model>/mlp.csv`` holds per-layer
timings of every non-attention operator of a transformer layer, by token count and
tensor-parallel degree, measured on real GPUs; ``data/profiling/network/<gpu>_dgx/
all_reduce.csv`` holds NCCL all-reduce timings by message size inside one DGX.

What the table holds (times in milliseconds):

- ``linear``: one series per (model, GPU, tp): ``tokens`` (ascending, every token
  count the source profiled) and ``ms``, the *linear-operator sum* of a forward pass:
  layers × (sum of the per-layer medians of input layernorm, QKV projection, rope,
  output projection, post-attention layernorm, MLP up projection, activation, MLP
  down projection and residual add, where the model has them) + the embedding's
  median. Attention kernels and the TP all-reduce are not in it. Rows the source
  measured twice are reduced to their median.
- ``allreduce``: per (GPU, tp), ``latency_us`` and ``gbytes_per_s`` of a least-squares
  fit time = latency + bytes / rate over the profiled sizes of at least 1 MiB (the
  per-size median, devices_per_node == tp), and the largest size fitted.

Regenerate it from a checkout of the source repository (the commit is read with
``git rev-parse HEAD`` unless given)::

    python -m traffic.profiles /path/to/vidur [--commit SHA] [--out traffic/data]

A profile whose heads, KV heads, hidden size or MLP width differ from the kvfabric
preset it is filed under is refused, so a number is never attributed to the wrong
model.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from . import presets

SOURCE_URL = "https://github.com/microsoft/vidur"
TABLE_NAME = "vidur_profiles.json"
DATA_DIR = Path(__file__).resolve().parent / "data"

# Vidur's model folder -> kvfabric preset name.
MODEL_DIRS = {
    "meta-llama/Meta-Llama-3-8B": "llama-3-8b",
    "meta-llama/Meta-Llama-3-70B": "llama-3-70b",
    "meta-llama/Llama-2-7b-hf": "llama-2-7b",
    "meta-llama/Llama-2-70b-hf": "llama-2-70b",
    "codellama/CodeLlama-34b-Instruct-hf": "codellama-34b",
    "Qwen/Qwen-72B": "qwen-72b",
    "internlm/internlm-20b": "internlm-20b",
    "microsoft/phi-2": "phi-2",
}
# GPUs with a kvfabric preset (Vidur also profiles the A40, which has none).
GPUS = ("a100", "h100")
LINEAR_OPS = (
    "input_layernorm",
    "attn_pre_proj",
    "attn_rope",
    "attn_post_proj",
    "post_attention_layernorm",
    "mlp_up_proj",
    "mlp_act",
    "mlp_down_proj",
    "add",
)
ALLREDUCE_MIN_BYTES = 1 << 20


class ProfileError(ValueError):
    """A source file that is missing, malformed or does not match its preset."""


def _median(row: dict[str, str], op: str) -> float | None:
    value = row.get(f"time_stats.{op}.median")
    return float(value) if value not in (None, "") else None


def _check_dims(path: Path, row: dict[str, str], m: presets.Model) -> None:
    want = {
        "n_head": m.attention_heads,
        "n_kv_head": m.kv_heads,
        "n_embd": m.hidden_size,
        "n_expanded_embd": m.intermediate_size,
    }
    got = {k: int(row[k]) for k in want}
    if got != want:
        raise ProfileError(f"{path}: profiled at {got}, preset {m.name!r} is {want}")


def linear_series(path: Path, m: presets.Model) -> dict[int, dict[str, list]]:
    """tp -> {"tokens": [...], "ms": [...]} of one ``mlp.csv``: the linear-operator sum."""
    by_key: dict[tuple[int, int], list[float]] = defaultdict(list)
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            _check_dims(path, row, m)
            ops = [t for t in (_median(row, op) for op in LINEAR_OPS) if t is not None]
            emb = _median(row, "emb")
            if len(ops) < 7 or emb is None:
                raise ProfileError(f"{path}: a row lacks the linear-operator medians")
            key = (int(row["num_tensor_parallel_workers"]), int(row["num_tokens"]))
            by_key[key].append(m.layers * sum(ops) + emb)
    series: dict[int, dict[str, list]] = {}
    for tp, tokens in sorted(by_key):
        s = series.setdefault(tp, {"tokens": [], "ms": []})
        s["tokens"].append(tokens)
        s["ms"].append(round(statistics.median(by_key[tp, tokens]), 4))
    return series


def allreduce_fit(path: Path) -> dict[int, dict[str, float]]:
    """tp -> latency and rate of one ``all_reduce.csv`` (one node, every GPU of it)."""
    times: dict[tuple[int, int], list[float]] = defaultdict(list)
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            tp, size = int(row["num_workers"]), int(row["size"])
            if int(row["devices_per_node"]) == tp and size >= ALLREDUCE_MIN_BYTES:
                times[tp, size].append(float(row["time_stats.all_reduce.median"]))
    fits: dict[int, dict[str, float]] = {}
    for tp in sorted({tp for tp, _ in times}):
        xs = [size for t, size in sorted(times) if t == tp]
        ys = [statistics.median(times[tp, size]) for size in xs]
        slope, intercept = statistics.linear_regression(xs, ys)
        if slope <= 0:
            raise ProfileError(f"{path}: all-reduce time does not grow with size at tp {tp}")
        fits[tp] = {
            "latency_us": round(max(intercept, 0.0) * 1e3, 3),
            "gbytes_per_s": round(1e-6 / slope, 2),  # bytes per ms -> GB/s
            "max_bytes": max(xs),
        }
    return fits


def build_table(source: Path, commit: str) -> dict:
    """The table (see the module docstring) from a checkout of the source at ``commit``."""
    linear = []
    for gpu in GPUS:
        for folder, name in MODEL_DIRS.items():
            path = source / "data/profiling/compute" / gpu / folder / "mlp.csv"
            if not path.is_file():
                continue
            for tp, s in linear_series(path, presets.model(name)).items():
                linear.append({"model": name, "gpu": gpu, "tp": tp, **s})
    if not linear:
        raise ProfileError(f"{source}: no data/profiling/compute/<gpu>/<model>/mlp.csv found")
    allreduce = []
    for gpu in GPUS:
        path = source / "data/profiling/network" / f"{gpu}_dgx" / "all_reduce.csv"
        if path.is_file():
            allreduce += [{"gpu": gpu, "tp": tp, **f} for tp, f in allreduce_fit(path).items()]
    return {
        "source": SOURCE_URL,
        "commit": commit,
        "licence": "MIT, Copyright (c) Microsoft Corporation; full text in LICENSE-vidur",
        "generated_by": "python -m traffic.profiles <checkout of the source>",
        "linear_ops": "layers x (" + " + ".join(LINEAR_OPS) + ") + emb, per-layer medians, ms",
        "linear": linear,
        "allreduce": allreduce,
    }


def dump_table(table: dict) -> str:
    """JSON with one series per line, so a regenerated table diffs by series."""
    head = {k: v for k, v in table.items() if k not in ("linear", "allreduce")}
    lines = [json.dumps(head)[:-1] + ","]
    for key in ("linear", "allreduce"):
        rows = ",\n".join(f"  {json.dumps(r, separators=(',', ':'))}" for r in table[key])
        lines.append(f' "{key}": [\n{rows}\n ]' + ("," if key == "linear" else ""))
    return "\n".join(lines) + "\n}\n"


def _git_commit(source: Path) -> str:
    try:
        out = subprocess.run(
            ["git", "-C", str(source), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        raise ProfileError(f"{source} is not a git checkout; pass --commit") from None
    return out.stdout.strip()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m traffic.profiles",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("source", type=Path, help="a checkout of github.com/microsoft/vidur")
    p.add_argument("--commit", help="the source commit (default: git rev-parse HEAD)")
    p.add_argument("--out", type=Path, default=DATA_DIR, help="directory of the table")
    args = p.parse_args(argv)
    try:
        table = build_table(args.source, args.commit or _git_commit(args.source))
    except (ProfileError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = args.out / TABLE_NAME
    out.write_text(dump_table(table))
    print(f"{out}: {len(table['linear'])} linear series, {len(table['allreduce'])} all-reduce fits")
    return 0


if __name__ == "__main__":
    sys.exit(main())
