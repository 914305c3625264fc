"""``kvfabric calc kv|prefill|decode``: back-of-envelope numbers from the model
presets and the compute model (no root)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from experiments.cli.common import EXIT_OK, console


def add_parsers(sub: Any) -> None:
    calc = sub.add_parser("calc", help="back-of-envelope numbers")
    csub = calc.add_subparsers(dest="calc_command", required=True)
    kv = csub.add_parser("kv", help="KV-cache bytes of a prompt and its transfer time")
    kv.add_argument("--model", required=True)
    kv.add_argument("--tokens", type=int, required=True)
    kv.add_argument("--dtype", choices=["fp16", "int8"], default="fp16")
    kv.add_argument("--link-gbps", type=float, default=400.0, help="real link rate (400)")
    pre = csub.add_parser("prefill", help="prefill time of a prompt, by part, and its model")
    pre.add_argument("--tokens", type=int, required=True, help="prompt tokens")
    dec = csub.add_parser("decode", help="one decode step's time, by part, and its model")
    dec.add_argument("--batch", type=int, required=True, help="sequences in the batch")
    dec.add_argument("--context", type=int, required=True, help="KV tokens of the whole batch")
    dec.add_argument("--kv-dtype", choices=["fp16", "int8", "fp8"], default="fp16")
    for step in (pre, dec):
        step.add_argument("--model", required=True)
        step.add_argument("--gpu", required=True)
        step.add_argument("--tp", type=int, default=1, help="tensor-parallel degree (1)")
        step.add_argument(
            "--efficiency",
            type=float,
            default=0.5,
            help="fraction of peak for the analytic terms (0.5)",
        )
        step.add_argument(
            "--roofline", action="store_true", help="the roofline even where a profile exists"
        )
        step.add_argument("--json", action="store_true")
    csub.add_parser(
        "validate", help="the compute model against the profiles it came from (a table)"
    )
    calc.set_defaults(handler=cmd_calc)


def cmd_calc(args: argparse.Namespace) -> int:
    from traffic.presets import format_kv_calc, kv_calc, model

    if args.calc_command in ("prefill", "decode"):
        return _calc_step(args)
    if args.calc_command == "validate":
        from traffic.validate_compute import main as validate

        return validate()
    result = kv_calc(model(args.model), args.tokens, args.dtype, args.link_gbps)
    console.print(format_kv_calc(result), highlight=False)
    return EXIT_OK


def _calc_step(args: argparse.Namespace) -> int:
    from traffic import compute

    if args.calc_command == "prefill":
        step = compute.prefill_step(
            args.model, args.gpu, args.tokens, args.tp, args.efficiency, roofline=args.roofline
        )
        shape = {"tokens": args.tokens}
    else:
        step = compute.decode_step(
            args.model,
            args.gpu,
            args.context,
            args.tp,
            kv_dtype=args.kv_dtype,
            efficiency=args.efficiency,
            batch=args.batch,
            roofline=args.roofline,
        )
        shape = {"batch": args.batch, "context_tokens": args.context}
    result = {
        "step": args.calc_command,
        "model": args.model.lower(),
        "gpu": args.gpu.lower(),
        "tp": args.tp,
        **shape,
        "efficiency": args.efficiency,
        "compute_model": step.compute_model,
        "total_ms": step.total_s * 1e3,
        "linear_ms": step.linear_s * 1e3,
        "attention_ms": step.attention_s * 1e3,
        "collective_ms": step.collective_s * 1e3,
    }
    if step.compute_model == "profiled":
        result["profile"] = compute.profile_source() | {"model": step.profiled_as}
    if args.json:
        print(json.dumps(result, indent=2))
        return EXIT_OK
    console.print(_format_step(result), highlight=False, soft_wrap=True)
    return EXIT_OK


def _format_step(r: dict) -> str:
    profiled = r["compute_model"] == "profiled"
    if r["step"] == "prefill":
        shape = f"{r['tokens']:,} tokens"
        linear = "linear operators (profiled)" if profiled else "2 x params FLOPs"
        attention = "causal attention FLOPs" if profiled else "attention (not modelled)"
        collective = "TP all-reduces (profiled)" if profiled else "TP all-reduces (not modelled)"
        analytic = "attention"
    else:
        shape = f"batch {r['batch']}, {r['context_tokens']:,} context tokens"
        linear = "linear operators (profiled)" if profiled else "weight read"
        attention = "KV read"
        collective = "all-reduce (sent as packets)"
        analytic = "KV read" if profiled else "weight and KV read"
    rows = [
        (r["step"], f"{r['model']} on {r['gpu']}, tp {r['tp']}, {shape}"),
        ("compute model", r["compute_model"]),
        (linear, f"{r['linear_ms']:.3f} ms"),
        (attention, f"{r['attention_ms']:.3f} ms"),
        (collective, f"{r['collective_ms']:.3f} ms"),
        ("step time", f"{r['total_ms']:.3f} ms"),
        ("efficiency", f"{r['efficiency']:g} of peak ({analytic if profiled else 'all'})"),
    ]
    if profiled:
        source = r["profile"]["source"].removeprefix("https://github.com/")
        of = r["profile"]["model"]
        borrowed = "" if of == r["model"] else f", {of}'s (same layer shapes)"
        rows.append(("profile", f"{source} @ {r['profile']['commit'][:12]}{borrowed}"))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)
