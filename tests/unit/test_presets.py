"""Presets and the KV calculator: the numbers users quote must come out exactly."""

import pytest

from traffic import compute
from traffic.presets import (
    GPUS,
    MODELS,
    PresetError,
    format_kv_calc,
    gpu,
    kv_calc,
    model,
)


def test_llama_70b_kv_bytes_per_token_fp16():
    assert model("llama-3-70b").kv_bytes_per_token("fp16") == 327_680


def test_calc_kv_8000_tokens_fp16_and_int8_halves():
    fp16 = kv_calc("llama-3-70b", 8000, "fp16", link_gbps=400)
    int8 = kv_calc("llama-3-70b", 8000, "int8", link_gbps=400)
    assert fp16["per_token_bytes"] == 327_680
    assert fp16["total_bytes"] == 2_621_440_000
    assert int8["total_bytes"] == 1_310_720_000
    assert fp16["transfer_s"] == pytest.approx(2_621_440_000 * 8 / 400e9)
    assert int8["transfer_s"] == pytest.approx(fp16["transfer_s"] / 2)


def test_calc_kv_transfer_time_scales_with_link():
    slow = kv_calc("llama-3-8b", 1000, link_gbps=100)
    fast = kv_calc("llama-3-8b", 1000, link_gbps=400)
    assert slow["transfer_s"] == pytest.approx(4 * fast["transfer_s"])
    assert slow["per_token_bytes"] == 32 * 8 * 128 * 2 * 2


def test_format_kv_calc_shows_the_numbers():
    text = format_kv_calc(kv_calc("llama-3-70b", 8000))
    assert "327,680" in text
    assert "2,621,440,000" in text
    assert "ms" in text and "llama-3-70b" in text


def test_moe_preset_has_experts():
    mixtral = model("mixtral-8x7b")
    assert mixtral.is_moe and mixtral.experts == 8 and mixtral.top_k == 2
    assert mixtral.compute_params_b < mixtral.params_b


def test_gpu_presets():
    assert gpu("H100").tflops == 989 and gpu("h100").hbm_gbps == 3350
    assert gpu("a100").tflops == 312 and gpu("a100").hbm_gbps == 2039
    assert gpu("h200").hbm_gbps == 4800 and gpu("h200").hbm_gb == 141


@pytest.mark.parametrize(
    ("lookup", "name", "known"),
    [(model, "gpt-5", MODELS), (gpu, "b200", GPUS)],
)
def test_unknown_preset_lists_known_ones(lookup, name, known):
    with pytest.raises(PresetError) as err:
        lookup(name)
    assert name in str(err.value)
    for preset in known:
        assert preset in str(err.value)
    assert isinstance(err.value, ValueError)


@pytest.mark.parametrize(
    "kwargs",
    [{"tokens": 0}, {"tokens": -5}, {"dtype": "fp4"}, {"link_gbps": 0}],
)
def test_kv_calc_rejects_bad_input(kwargs):
    args = {"model": "llama-3-70b", "tokens": 100} | kwargs
    with pytest.raises(PresetError):
        kv_calc(**args)


def test_prefill_roofline_is_compute_bound_and_tp_splits_it():
    def roofline(gpu, tp=1):
        return compute.prefill_step("llama-3-70b", gpu, 8000, tp, 0.5, roofline=True).total_s

    one = roofline("h100")
    assert one == pytest.approx(2 * 70.6e9 * 8000 / (989e12 * 0.5))
    assert roofline("h100", tp=4) == pytest.approx(one / 4)
    assert roofline("a100") > one


def test_decode_step_is_memory_bound():
    step = compute.decode_step_time_s("llama-3-8b", "h100", context_tokens=0, efficiency=1.0)
    assert step == pytest.approx(8.03e9 * 2 / 3350e9)
    h200 = compute.decode_step_time_s("llama-3-8b", "h200", context_tokens=0, efficiency=1.0)
    assert h200 < step
