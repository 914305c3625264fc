"""The profile-calibrated compute model: it predicts measured step times it was not fit
on, reproduces the published linear-operator sums, charges decode for its KV reads, and
says which model produced a number."""

import json
import statistics

import pytest

from experiments.cli.main import EXIT_OK, EXIT_USAGE, main
from traffic import compute, profiles
from traffic.compute import LinearProfile
from traffic.presets import PresetError, model

SERIES = compute._table()["linear"]


def _held_out(series: dict) -> tuple[LinearProfile, list[int], list[float]]:
    """A profile of every other row (first and last always in), and the rows left out."""
    tokens, ms = series["tokens"], series["ms"]
    fit = list(range(0, len(tokens), 2))
    if fit[-1] != len(tokens) - 1:
        fit.append(len(tokens) - 1)
    held = [i for i in range(len(tokens)) if i not in set(fit)]
    profile = LinearProfile(tuple(tokens[i] for i in fit), tuple(ms[i] / 1e3 for i in fit))
    return profile, [tokens[i] for i in held], [ms[i] / 1e3 for i in held]


@pytest.mark.parametrize("series", SERIES, ids=lambda s: f"{s['model']}-{s['gpu']}-tp{s['tp']}")
def test_model_predicts_profiled_token_counts_it_was_not_fit_on(series):
    # Fit on every other profiled token count, predict the rest. GEMM tile and kernel
    # selection make measured times jump by up to ~60 % between neighbouring counts below
    # ~2k tokens (e.g. Llama-2-70B on H100: 512 tokens 100 ms, 520 tokens 163 ms), which
    # no interpolation from the neighbours can follow; so: every held-out count from 4,096
    # tokens on within 5 %, the typical one within 2.5 %, at least 80 % of them within
    # 5 %, none off by more than 25 %, and their sum (a mixed workload) within 2 %.
    profile, tokens, measured = _held_out(series)
    errors = {n: profile.at(n) / t - 1 for n, t in zip(tokens, measured, strict=True)}
    large = {n: e for n, e in errors.items() if n >= 4096}
    assert all(abs(e) <= 0.05 for e in large.values()), large
    assert statistics.median(abs(e) for e in errors.values()) <= 0.025
    assert sum(abs(e) <= 0.05 for e in errors.values()) >= 0.8 * len(errors)
    assert max(abs(e) for e in errors.values()) <= 0.25
    predicted = sum(profile.at(n) for n in tokens)
    assert predicted == pytest.approx(sum(measured), rel=0.02)


@pytest.mark.parametrize(
    ("name", "tp", "linear_ms"),
    # Linear-operator sums of Vidur's A100 profiles at 8,192 tokens, computed separately
    # from the raw CSVs (per-layer medians × layers + embedding).
    [
        ("llama-3-8b", 1, 543),
        ("llama-3-8b", 4, 153),
        ("llama-3-8b", 8, 84.5),
        ("llama-3-70b", 1, 5159),
        ("llama-3-70b", 4, 1295),
        ("llama-3-70b", 8, 703),
    ],
)
def test_prefill_linear_part_matches_the_published_profile_sums(name, tp, linear_ms):
    step = compute.prefill_step(name, "a100", 8192, tp)
    assert step.compute_model == "profiled"
    assert step.linear_s * 1e3 == pytest.approx(linear_ms, rel=0.05)


def test_llama_8b_prefill_is_profiled_linear_plus_causal_attention():
    step = compute.prefill_step("llama-3-8b", "a100", 8192)
    # 4 × 32 heads × 128 × 32 layers × 8192 × 8193 / 2 FLOPs at 0.5 × 312 TFLOP/s
    attention_s = 4 * 32 * 128 * 32 * 8192 * 8193 / 2 / (0.5 * 312e12)
    assert step.attention_s == pytest.approx(attention_s)
    assert step.collective_s == 0  # tp 1: nothing to all-reduce
    assert compute.prefill_time_s("llama-3-8b", "a100", 8192) == pytest.approx(
        0.543 + attention_s, rel=0.05
    )
    # The old roofline said 843 ms: the calibrated model is a fifth faster.
    assert compute.prefill_time_s("llama-3-8b", "a100", 8192) < 0.8 * 2 * 8.03e9 * 8192 / 156e12


def test_prefill_beyond_the_profiled_range_scales_with_the_tokens():
    # Llama-2-70B is profiled up to 4,096 tokens; 8,192 costs twice the linear part.
    at_4k = compute.prefill_step("llama-2-70b", "h100", 4096, 4)
    at_8k = compute.prefill_step("llama-2-70b", "h100", 8192, 4)
    assert at_8k.linear_s == pytest.approx(2 * at_4k.linear_s)
    assert at_8k.attention_s == pytest.approx(4 * at_4k.attention_s, rel=1e-3)


def test_tensor_parallel_prefill_pays_for_its_unsent_all_reduces():
    one = compute.prefill_step("llama-3-70b", "a100", 4096, 1)
    eight = compute.prefill_step("llama-3-70b", "a100", 4096, 8)
    assert one.collective_s == 0
    (fit,) = [f for f in compute._table()["allreduce"] if (f["gpu"], f["tp"]) == ("a100", 8)]
    # 2 all-reduces per layer of 4096 tokens × 8192 × 2 bytes, each latency + bytes / rate
    per_call = fit["latency_us"] * 1e-6 + 4096 * 8192 * 2 / (fit["gbytes_per_s"] * 1e9)
    assert eight.collective_s == pytest.approx(2 * 80 * per_call)
    assert eight.collective_s > 0.15 * eight.total_s  # not a rounding error at tp 8
    assert eight.total_s < one.total_s


def test_decode_grows_with_context_by_the_kv_read():
    m = model("llama-3-8b")
    short = compute.decode_step("llama-3-8b", "a100", 32 * 512, tp=2, batch=32)
    long = compute.decode_step("llama-3-8b", "a100", 32 * 8192, tp=2, batch=32)
    assert short.compute_model == long.compute_model == "profiled"
    kv_read_s = m.kv_bytes_per_token() * 32 * (8192 - 512) / (2 * 2039e9 * 0.5)
    assert long.total_s - short.total_s == pytest.approx(kv_read_s)
    assert long.linear_s == short.linear_s  # the weights are read once either way
    assert long.collective_s == 0  # the driver sends the step's all-reduce as packets
    int8 = compute.decode_step("llama-3-8b", "a100", 32 * 8192, tp=2, kv_dtype="int8", batch=32)
    assert int8.attention_s == pytest.approx(long.attention_s / 2)


def test_decode_linear_part_is_the_profile_at_the_batch_size():
    # Vidur's A100 profile at 32 tokens, computed separately: 10.9 / 3.6 / 2.3 ms at tp 1 / 4 / 8
    for tp, ms in ((1, 10.9), (4, 3.6), (8, 2.3)):
        step = compute.decode_step("llama-3-8b", "a100", 0, tp, batch=32)
        assert step.linear_s * 1e3 == pytest.approx(ms, rel=0.05)
    small = compute.decode_step_time_s("llama-3-8b", "a100", 0, batch=1)
    big = compute.decode_step_time_s("llama-3-8b", "a100", 0, batch=1024)
    assert big > 2 * small  # a big batch turns the linear operators compute-bound


@pytest.mark.parametrize(
    ("args", "source"),
    [
        (("llama-3-8b", "a100"), "profiled"),
        (("llama-3-70b", "a100", 8), "profiled"),
        (("qwen-72b", "h100", 4), "profiled"),
        (("llama-3-70b", "h100", 4), "profiled"),  # as Llama-2-70B, same layer shapes
        (("llama-3-8b", "h100"), "roofline"),  # Vidur has no Llama-3 profile on H100
        (("llama-3-70b", "h200"), "roofline"),
        (("llama-3-70b", "a100", 16), "roofline"),  # profiled up to tp 8
        (("phi-2", "a100", 2), "roofline"),  # profiled at tp 1 only
        (("mixtral-8x7b", "a100"), "roofline"),
    ],
)
def test_model_source_names_the_model_a_number_comes_from(args, source):
    assert compute.model_source(*args) == source


def test_a_model_borrows_only_a_profile_of_identical_layer_shapes():
    # Llama-3-70B and Llama-2-70B have the same layers (80 × 64/8 heads, 8192, 28672);
    # where both are profiled (A100) their linear operators agree within a few %.
    for tp in (1, 2, 4, 8):
        own = compute.linear_profile("llama-3-70b", "a100", tp)
        other = compute.linear_profile("llama-2-70b", "a100", tp)
        ratios = [own.at(n) / other.at(n) for n in other.tokens]
        assert statistics.median(ratios) == pytest.approx(1, abs=0.03)
    h100 = compute.prefill_step("llama-3-70b", "h100", 2048, 4)
    assert h100.profiled_as == "llama-2-70b"
    assert h100.linear_s == compute.prefill_step("llama-2-70b", "h100", 2048, 4).linear_s
    assert compute.prefill_step("llama-3-70b", "a100", 2048, 4).profiled_as == "llama-3-70b"
    # Llama-3-8B's layers differ from Llama-2-7B's (8 KV heads, a wider MLP): no borrowing
    assert compute.profiled_as("llama-3-8b", "h100") is None


def test_unprofiled_and_fp8_steps_fall_back_to_the_roofline():
    step = compute.prefill_step("llama-3-70b", "h200", 8000, 4)
    assert step.compute_model == "roofline" and step.profiled_as is None
    assert step.total_s == pytest.approx(2 * 70.6e9 * 8000 / (4 * 989e12 * 0.5))
    fp8 = compute.decode_step("llama-3-8b", "a100", 1000, weight_dtype="fp8")
    assert fp8.compute_model == "roofline"
    assert fp8.linear_s == pytest.approx(8.03e9 / (2039e9 * 0.5))


@pytest.mark.parametrize(
    "call",
    [
        lambda: compute.prefill_step("llama-3-8b", "a100", 0),
        lambda: compute.decode_step("llama-3-8b", "a100", -1),
        lambda: compute.decode_step("llama-3-8b", "a100", 10, batch=0),
    ],
)
def test_bad_step_shapes_are_refused(call):
    with pytest.raises(PresetError):
        call()


def test_token_counts_from_a_pandas_table_are_accepted():
    np = pytest.importorskip("numpy")
    step = compute.prefill_step("llama-3-8b", "a100", np.int64(8192))
    assert step.total_s == compute.prefill_step("llama-3-8b", "a100", 8192).total_s
    decode = compute.decode_step("llama-3-8b", "a100", np.int64(4096), batch=np.int64(4))
    assert decode.total_s == compute.decode_step("llama-3-8b", "a100", 4096, batch=4).total_s


def test_the_table_names_its_source_commit_and_licence():
    source = compute.profile_source()
    assert source["source"] == "https://github.com/microsoft/vidur"
    assert len(source["commit"]) == 40 and set(source["commit"]) <= set("0123456789abcdef")
    notice = (compute.PROFILE_TABLE.parent / "LICENSE-vidur").read_text()
    assert "MIT License" in notice and "Microsoft Corporation" in notice


# ---- regenerating the table from a checkout of the source ------------------------------

_OPS = (*profiles.LINEAR_OPS, "emb")


def _mlp_csv(rows: list[tuple[int, int, float]], dims: tuple[int, int, int, int]) -> str:
    """A Vidur-style mlp.csv: every operator's median is ``ms`` for (tp, tokens, ms)."""
    cols = [f"time_stats.{op}.median" for op in _OPS]
    head = [*cols, "n_head", "n_kv_head", "n_embd", "n_expanded_embd"]
    head += ["num_tokens", "num_tensor_parallel_workers"]
    lines = [",".join(head)]
    for tp, tokens, ms in rows:
        lines.append(
            ",".join([str(ms)] * len(cols) + [str(d) for d in dims] + [str(tokens), str(tp)])
        )
    return "\n".join(lines) + "\n"


def _checkout(tmp_path, dims=(32, 8, 4096, 14336)):
    folder = tmp_path / "data/profiling/compute/a100/meta-llama/Meta-Llama-3-8B"
    folder.mkdir(parents=True)
    rows = [(1, 1, 0.01), (1, 8, 0.02), (1, 8, 0.04), (2, 1, 0.005)]
    (folder / "mlp.csv").write_text(_mlp_csv(rows, dims))
    net = tmp_path / "data/profiling/network/a100_dgx"
    net.mkdir(parents=True)
    lines = ["size,num_workers,devices_per_node,time_stats.all_reduce.median"]
    # 10 µs + bytes / 100 GB/s, plus rows the fit must ignore (small, or across nodes)
    for size in (1 << 20, 1 << 22, 1 << 24):
        lines.append(f"{size},2,2,{0.01 + size / 1e8}")
    lines += ["2048,2,2,5.0", f"{1 << 22},2,1,9.0"]
    (net / "all_reduce.csv").write_text("\n".join(lines) + "\n")
    return tmp_path


def test_regenerated_table_sums_every_linear_operator_over_the_layers(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    assert (
        profiles.main([str(_checkout(tmp_path / "src")), "--commit", "ab" * 20, "--out", str(out)])
        == 0
    )
    table = json.loads((out / profiles.TABLE_NAME).read_text())
    assert table["commit"] == "ab" * 20 and table["source"].endswith("microsoft/vidur")
    tp1, tp2 = table["linear"]
    # 9 per-layer operators × 32 layers + the embedding; 8 tokens measured twice -> median
    assert (tp1["model"], tp1["gpu"], tp1["tp"]) == ("llama-3-8b", "a100", 1)
    assert tp1["tokens"] == [1, 8]
    assert tp1["ms"] == pytest.approx([0.01 * (9 * 32 + 1), 0.03 * (9 * 32 + 1)])
    assert tp2["tp"] == 2 and tp2["ms"] == pytest.approx([0.005 * 289])
    (fit,) = table["allreduce"]
    assert fit["latency_us"] == pytest.approx(10, abs=0.01)
    assert fit["gbytes_per_s"] == pytest.approx(100, rel=1e-3)


def test_a_profile_of_other_dimensions_is_refused(tmp_path):
    source = _checkout(tmp_path, dims=(32, 32, 4096, 11008))  # Llama-2-7B's shape
    with pytest.raises(profiles.ProfileError, match="llama-3-8b"):
        profiles.build_table(source, "0" * 40)
    assert profiles.main([str(source), "--commit", "0" * 40, "--out", str(tmp_path)]) == 2


# ---- kvfabric calc prefill | decode -----------------------------------------------------


def test_calc_prefill_prints_the_parts_and_the_model(capsys):
    argv = ["calc", "prefill", "--model", "llama-3-8b", "--gpu", "a100", "--tokens", "8192"]
    assert main([*argv, "--json"]) == EXIT_OK
    r = json.loads(capsys.readouterr().out)
    assert r["compute_model"] == "profiled"
    assert r["total_ms"] == pytest.approx(r["linear_ms"] + r["attention_ms"] + r["collective_ms"])
    assert r["linear_ms"] == pytest.approx(543, rel=0.05)
    assert r["profile"]["commit"] == compute.profile_source()["commit"]
    assert main(argv) == EXIT_OK
    text = capsys.readouterr().out
    assert "profiled" in text and f"{r['total_ms']:.3f} ms" in text


def test_calc_decode_says_when_it_fell_back_to_the_roofline(capsys):
    argv = ["calc", "decode", "--model", "llama-3-8b", "--gpu", "h100", "--batch", "32"]
    assert main([*argv, "--context", "32000", "--json"]) == EXIT_OK
    r = json.loads(capsys.readouterr().out)
    assert r["compute_model"] == "roofline" and r["collective_ms"] == 0
    assert r["attention_ms"] > 0 and "profile" not in r
    assert main([*argv, "--context", "-1"]) == EXIT_USAGE
    assert "context_tokens" in capsys.readouterr().err


def test_calc_roofline_flag_reproduces_the_old_model(capsys):
    argv = ["calc", "prefill", "--model", "llama-3-8b", "--gpu", "a100", "--tokens", "8192"]
    assert main([*argv, "--roofline", "--json"]) == EXIT_OK
    old = json.loads(capsys.readouterr().out)
    assert old["compute_model"] == "roofline"
    assert old["total_ms"] == pytest.approx(2 * 8.03e9 * 8192 / (312e12 * 0.5) * 1e3)
    main([*argv, "--json"])
    assert json.loads(capsys.readouterr().out)["total_ms"] < 0.8 * old["total_ms"]


def test_validation_table_holds_out_the_row_it_reports(capsys):
    from traffic import validate_compute as v

    series = v._series("llama-3-8b", "a100", 1)
    measured = series["ms"][series["tokens"].index(8192)] / 1e3
    held = v.held_out_linear_s(series, 8192)
    assert held != measured and held == pytest.approx(measured, rel=0.05)
    with pytest.raises(ValueError, match="end of the profile"):
        v.held_out_linear_s(series, series["tokens"][-1])
    assert main(["calc", "validate"]) == 0  # docs/concepts/compute.md's table
    out = capsys.readouterr().out
    assert out.count("| prefill |") + out.count("| decode |") == len(v.ROWS)
    assert "7,218 held-out counts" in out


def test_calc_names_a_borrowed_profile(capsys):
    argv = ["calc", "prefill", "--model", "llama-3-70b", "--gpu", "h100", "--tokens", "1000"]
    assert main([*argv, "--tp", "4", "--json"]) == EXIT_OK
    r = json.loads(capsys.readouterr().out)
    assert r["compute_model"] == "profiled" and r["profile"]["model"] == "llama-2-70b"
    assert main([*argv, "--tp", "4"]) == EXIT_OK
    assert "llama-2-70b's (same layer shapes)" in capsys.readouterr().out


def test_provenance_says_roofline_when_any_instance_falls_back():
    both = compute.provenance("llama-3-70b", "h100", [4, 4])
    assert both["compute_model"] == "profiled" and both["by_tp"] == {4: "profiled"}
    assert both["profiled_as"] == {4: "llama-2-70b"}
    assert both["profile"]["commit"] == compute.profile_source()["commit"]
    mixed = compute.provenance("llama-3-70b", "a100", [8, 16])
    assert mixed["compute_model"] == "roofline" and mixed["by_tp"][16] == "roofline"
    none = compute.provenance("llama-3-8b", "h100", [1, 2])
    assert none["compute_model"] == "roofline" and none["profile"] is None
