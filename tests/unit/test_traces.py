"""Trace readers on small files written here, on the bundled Azure copy, and the generator."""

import json

import numpy as np
import pandas as pd
import pytest

from experiments.spec.config import Distribution
from traffic.traces import (
    COLUMNS,
    TokenDist,
    TraceError,
    bundled_azure_trace,
    read_azure,
    read_burstgpt,
    read_mooncake,
    read_trace,
    synthetic_arrivals,
)

MOONCAKE = [
    {"timestamp": 0, "input_length": 1024, "output_length": 10, "hash_ids": [0, 1]},
    {"timestamp": 1500, "input_length": 600, "output_length": 5, "hash_ids": [0, 2]},
    {"timestamp": 4000, "input_length": 100, "output_length": 7, "hash_ids": [3]},
]

AZURE = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,374,44
2023-11-16 18:15:50.9951690,396,109
2023-11-16 18:15:51.0000000,1000,1
"""

BURSTGPT = """Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type
5,ChatGPT,472,18,490,Conversation log
6.5,ChatGPT,1087,0,1087,Conversation log
10,GPT-4,200,300,500,API log
"""


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def mooncake_file(tmp_path, rows=MOONCAKE):
    return write(tmp_path, "trace.jsonl", "".join(json.dumps(r) + "\n" for r in rows))


# --- readers on known content ---------------------------------------------------------------


def test_mooncake_reader(tmp_path):
    df = read_mooncake(mooncake_file(tmp_path))
    assert list(df.columns) == COLUMNS
    assert list(df["arrival_ms"]) == [0.0, 1500.0, 4000.0]
    assert list(df["input_tokens"]) == [1024, 600, 100]
    assert list(df["output_tokens"]) == [10, 5, 7]
    assert list(df["hash_ids"]) == [[0, 1], [0, 2], [3]]


def test_azure_reader_parses_seven_fractional_digits(tmp_path):
    df = read_azure(write(tmp_path, "azure.csv", AZURE))
    # 18:15:50.9951690 - 18:15:46.6805900 = 4.3145790 s; 18:15:51.0 - 46.68059 = 4.31941 s
    assert list(df["arrival_ms"]) == pytest.approx([0.0, 4314.579, 4319.41], abs=1e-9)
    assert list(df["input_tokens"]) == [374, 396, 1000]
    assert list(df["output_tokens"]) == [44, 109, 1]
    assert all(h == [] for h in df["hash_ids"])


def test_burstgpt_reader_rebases_and_keeps_failed_requests(tmp_path):
    df = read_burstgpt(write(tmp_path, "burst.csv", BURSTGPT))
    assert list(df["arrival_ms"]) == [0.0, 1500.0, 5000.0]
    assert list(df["input_tokens"]) == [472, 1087, 200]
    assert list(df["output_tokens"]) == [18, 1, 300]  # 0 response tokens -> 1


def test_read_trace_dispatches_and_rejects_unknown_format(tmp_path):
    path = write(tmp_path, "burst.csv", BURSTGPT)
    assert len(read_trace(path, "burstgpt", limit=2)) == 2
    with pytest.raises(ValueError, match="allowed"):
        read_trace(path, "sharegpt")


# --- options --------------------------------------------------------------------------------


def test_speedup_limit_window_and_token_scale(tmp_path):
    path = mooncake_file(tmp_path)
    assert list(read_mooncake(path, speedup=2)["arrival_ms"]) == [0.0, 750.0, 2000.0]
    assert len(read_mooncake(path, limit=2)) == 2
    # window [1 s, 4 s) keeps the request at 1.5 s, re-based to the window start
    win = read_mooncake(path, start_s=1.0, window_s=3.0)
    assert list(win["arrival_ms"]) == [500.0]
    assert list(win["input_tokens"]) == [600]
    # window without an end, then limited
    assert list(read_mooncake(path, start_s=1.0, limit=1)["arrival_ms"]) == [500.0]
    # token_scale 0.01: 1024 -> 10, 600 -> 6, 100 -> 1; 5 -> 1 (never below 1);
    # a 10-token prompt is one 512-token block, so only the first hash id stays
    scaled = read_mooncake(path, token_scale=0.01)
    assert list(scaled["input_tokens"]) == [10, 6, 1]
    assert list(scaled["output_tokens"]) == [1, 1, 1]
    assert list(scaled["hash_ids"]) == [[0], [0], [3]]
    assert list(read_mooncake(path, token_scale=2)["input_tokens"]) == [2048, 1200, 200]


def test_empty_window_and_bad_options(tmp_path):
    path = mooncake_file(tmp_path)
    with pytest.raises(TraceError, match="no requests in window"):
        read_mooncake(path, start_s=100)
    for bad in ({"speedup": 0}, {"limit": 0}, {"window_s": 0}, {"token_scale": -1}):
        with pytest.raises(ValueError):
            read_mooncake(path, **bad)


# --- bad input ------------------------------------------------------------------------------


def test_missing_file_names_the_path(tmp_path):
    missing = tmp_path / "nope.csv"
    for reader in (read_mooncake, read_azure, read_burstgpt):
        with pytest.raises(TraceError, match="nope.csv"):
            reader(missing)


@pytest.mark.parametrize(
    ("reader", "name", "text", "line", "what"),
    [
        (
            read_mooncake,
            "m.jsonl",
            '{"timestamp": 0, "input_length": 5, "output_length": 1}\n{not json\n',
            2,
            "not valid JSON",
        ),
        (
            read_mooncake,
            "m.jsonl",
            "\n" + json.dumps({"timestamp": 1, "input_length": 5}),
            2,
            "output_length",
        ),
        (
            read_mooncake,
            "m.jsonl",
            json.dumps({"timestamp": 1, "input_length": -5, "output_length": 1}),
            1,
            "input_length",
        ),
        (
            read_mooncake,
            "m.jsonl",
            json.dumps({"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": ["a"]}),
            1,
            "hash_ids",
        ),
        (read_azure, "a.csv", AZURE + "2023-11-16 18:16,12,3\n", 5, "TIMESTAMP"),
        (read_azure, "a.csv", AZURE + "2023-11-16 18:16:00.1,twelve,3\n", 5, "ContextTokens"),
        (read_azure, "a.csv", AZURE + "2023-11-16 18:16:00.1,12\n", 5, "expected 3 fields"),
        (read_burstgpt, "b.csv", BURSTGPT + "11,ChatGPT,1.5,3,4,API log\n", 5, "whole number"),
    ],
)
def test_malformed_line_names_file_and_line(tmp_path, reader, name, text, line, what):
    path = write(tmp_path, name, text)
    with pytest.raises(TraceError, match=what) as err:
        reader(path)
    assert f"{path}:{line}:" in str(err.value)
    assert isinstance(err.value, ValueError)


def test_missing_header_column(tmp_path):
    path = write(tmp_path, "a.csv", "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.1,3\n")
    with pytest.raises(TraceError, match="GeneratedTokens"):
        read_azure(path)


def test_header_only_file_has_no_requests(tmp_path):
    with pytest.raises(TraceError, match="no requests"):
        read_azure(write(tmp_path, "a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"))


# --- bundled Azure copy ---------------------------------------------------------------------


def test_bundled_azure_trace():
    path = bundled_azure_trace()
    assert path.is_file()
    assert (path.parent / "LICENSE").is_file() and (path.parent / "README.md").is_file()
    df = read_azure(path)
    assert len(df) == 2000
    assert df["arrival_ms"].iloc[0] == 0.0
    assert df["arrival_ms"].is_monotonic_increasing
    # first row 374/44, last kept row 424/96, span 18:15:46.6805900 -> 18:22:50.9400470
    assert (df["input_tokens"].iloc[0], df["output_tokens"].iloc[0]) == (374, 44)
    assert (df["input_tokens"].iloc[-1], df["output_tokens"].iloc[-1]) == (424, 96)
    span = df["arrival_ms"].iloc[-1]
    assert span == pytest.approx(424_259.457, abs=1e-6)
    fast = read_azure(path, speedup=2)
    assert fast["arrival_ms"].iloc[-1] == pytest.approx(span / 2)
    assert len(read_azure(path, limit=50)) == 50
    assert (df["input_tokens"] >= 1).all() and (df["output_tokens"] >= 1).all()


# --- synthetic ------------------------------------------------------------------------------


def test_synthetic_is_deterministic_given_the_seed():
    kw = {
        "n": 200,
        "rate_per_s": 20.0,
        "input_tokens": {"dist": "lognormal", "mean": 1000, "sigma": 0.5},
        "output_tokens": {"dist": "uniform", "low": 10, "high": 20},
    }
    a = synthetic_arrivals(np.random.default_rng(3), **kw)
    b = synthetic_arrivals(3, **kw)
    pd.testing.assert_frame_equal(a, b)
    c = synthetic_arrivals(4, **kw)
    assert not a["arrival_ms"].equals(c["arrival_ms"])
    assert list(a.columns) == COLUMNS and len(a) == 200
    assert a["arrival_ms"].is_monotonic_increasing
    assert a["output_tokens"].between(10, 20).all()
    # mean rate 20/s: 200 requests take about 10 s; the lognormal mean is about 1000
    assert 7_000 < a["arrival_ms"].iloc[-1] < 13_000
    assert 850 < a["input_tokens"].mean() < 1150
    assert all(h == [] for h in a["hash_ids"])


def test_a_configurations_distribution_draws_as_its_mapping_does():
    # the typed configuration's Distribution (its unset fields None) is the dict it came from
    typed = {
        "input_tokens": Distribution("lognormal", mean=1000.0, sigma=0.5),
        "output_tokens": Distribution("uniform", low=10, high=20),
    }
    plain = {
        "input_tokens": {"dist": "lognormal", "mean": 1000, "sigma": 0.5},
        "output_tokens": {"dist": "uniform", "low": 10, "high": 20},
    }
    pd.testing.assert_frame_equal(
        synthetic_arrivals(3, n=50, rate_per_s=20.0, **typed),
        synthetic_arrivals(3, n=50, rate_per_s=20.0, **plain),
    )
    assert TokenDist.parse(Distribution(value=7)) == TokenDist("fixed", value=7)
    with pytest.raises(ValueError, match="uniform needs"):
        TokenDist.parse(Distribution("uniform", low=5, high=2))


def test_synthetic_duration_and_bursty_silence():
    df = synthetic_arrivals(1, duration_s=10, rate_per_s=50, pattern="bursty", on_s=1, off_s=1)
    t_s = df["arrival_ms"].to_numpy() / 1e3
    assert (t_s < 10).all()
    assert ((t_s % 2.0) < 1.0).all()  # nothing arrives during the off periods
    # mean rate stays 50/s over 10 s: about 500 requests
    assert 400 < len(df) < 600
    assert (
        list(synthetic_arrivals(1, n=3, duration_s=100, rate_per_s=1)["input_tokens"]) == [512] * 3
    )


def test_synthetic_shared_prefixes_repeat_hash_ids():
    df = synthetic_arrivals(
        7, n=50, rate_per_s=10, input_tokens=2048, shared_prefix_blocks=2, n_prefixes=3
    )
    # 2048 tokens = 4 blocks: 2 from one of 3 prefixes (ids 0..5), 2 unique (ids >= 6)
    assert all(len(h) == 4 for h in df["hash_ids"])
    prefixes = {tuple(h[:2]) for h in df["hash_ids"]}
    assert prefixes <= {(0, 1), (2, 3), (4, 5)} and len(prefixes) > 1
    suffix = [i for h in df["hash_ids"] for i in h[2:]]
    assert len(suffix) == len(set(suffix)) == 100 and min(suffix) >= 6
    # short prompts take only the prefix blocks they cover
    short = synthetic_arrivals(7, n=5, rate_per_s=10, input_tokens=100, shared_prefix_blocks=2)
    assert all(h == [0] for h in short["hash_ids"])


def test_synthetic_bad_arguments():
    with pytest.raises(ValueError, match="n or duration_s"):
        synthetic_arrivals(1, rate_per_s=1)
    with pytest.raises(ValueError, match="pattern"):
        synthetic_arrivals(1, n=1, rate_per_s=1, pattern="zipf")
    with pytest.raises(ValueError, match="distribution"):
        synthetic_arrivals(1, n=1, rate_per_s=1, input_tokens={"dist": "pareto"})
    with pytest.raises(ValueError, match="key"):
        synthetic_arrivals(1, n=1, rate_per_s=1, input_tokens={"dist": "fixed", "mu": 3})


# --- peaky: production burstiness -------------------------------------------------------


def busiest_second_shares(df: pd.DataFrame, window_s: float) -> list[float]:
    """Per window, the share of its requests that its busiest whole second holds."""
    t_s = df["arrival_ms"].to_numpy() / 1e3
    window = np.floor(t_s / window_s).astype(int)
    shares = []
    for w in np.unique(window):
        inside = t_s[window == w] - w * window_s
        shares.append(np.bincount(np.floor(inside).astype(int)).max() / len(inside))
    return shares


@pytest.mark.parametrize(
    ("share", "rate", "duration_s", "window_s"),
    [(0.18, 5.0, 3600.0, None), (0.05, 20.0, 300.0, 60.0), (0.30, 2.0, 120.0, 20.0)],
    ids=["fineserve-hour", "minute-windows", "short-windows"],
)
def test_peaky_busiest_second_holds_the_requested_share(share, rate, duration_s, window_s):
    for seed in range(3):
        df = synthetic_arrivals(
            seed,
            duration_s=duration_s,
            rate_per_s=rate,
            pattern="peaky",
            peak_second_share=share,
            window_s=window_s,
        )
        shares = busiest_second_shares(df, window_s or duration_s)
        assert len(shares) == duration_s // (window_s or duration_s)
        assert all(abs(s - share) <= 0.1 * share for s in shares), shares
        # the peak is extra burstiness, not extra load: the mean rate is the one asked for
        assert len(df) == pytest.approx(rate * duration_s, rel=0.1)
        assert df["arrival_ms"].is_monotonic_increasing
        assert (df["arrival_ms"] < duration_s * 1e3).all()


def test_peaky_is_burstier_than_poisson_at_the_same_rate():
    kw = {"duration_s": 600, "rate_per_s": 10}
    poisson = busiest_second_shares(synthetic_arrivals(5, **kw), 600)[0]
    peaky = busiest_second_shares(synthetic_arrivals(5, pattern="peaky", **kw), 600)[0]
    assert poisson < 0.01 and peaky == pytest.approx(0.18, rel=0.1)


def test_peaky_with_a_request_count_makes_exactly_n():
    df = synthetic_arrivals(2, n=400, rate_per_s=20, pattern="peaky", peak_second_share=0.25)
    assert len(df) == 400
    assert busiest_second_shares(df, 20)[0] == pytest.approx(0.25, rel=0.1)
    again = synthetic_arrivals(2, n=400, rate_per_s=20, pattern="peaky", peak_second_share=0.25)
    pd.testing.assert_frame_equal(df, again)


def test_peaky_refuses_a_share_its_window_cannot_hold():
    with pytest.raises(ValueError, match="peak_second_share"):  # 1/60 is every second alike
        synthetic_arrivals(1, duration_s=60, rate_per_s=5, pattern="peaky", peak_second_share=0.01)
    with pytest.raises(ValueError, match="peak_second_share"):
        synthetic_arrivals(1, duration_s=60, rate_per_s=5, pattern="peaky", peak_second_share=1.0)
    with pytest.raises(ValueError, match="window_s"):
        synthetic_arrivals(1, n=5, rate_per_s=1, pattern="peaky", window_s=1)
