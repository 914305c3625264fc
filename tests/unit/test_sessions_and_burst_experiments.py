"""The bundled agentic-sessions and peak-burst experiments: their specs load, fit this
machine's default envelope in at most six runs, and their estimates (the fluid
simulator) show what the handouts say; and the per-server prefix cache they compare
with the pool has no remote hits."""

import pytest

from experiments.analysis.estimates import estimate
from experiments.orchestration.envelope import DEFAULT
from experiments.orchestration.runner import prepare
from experiments.spec.load import expand, find_bundled, load_spec
from traffic.serving import PrefixCachePool

NONE, SERVER, POOL = (
    'prefix_cache={"enabled":false}',
    'prefix_cache={"enabled":true,"shared":false}',
    'prefix_cache={"enabled":true,"shared":true}',
)


def _estimates(name):
    runs = expand(load_spec(find_bundled(name)))
    return runs, {r.label: estimate(r.config, r.fabric())["serving"] for r in runs}


@pytest.fixture(scope="module")
def agentic():
    return _estimates("agentic-sessions")


@pytest.fixture(scope="module")
def burst():
    return _estimates("peak-burst")


# ---- the per-server cache ----------------------------------------------------------------


def test_a_per_server_cache_misses_what_another_server_holds():
    pool, alone = PrefixCachePool([0, 1], 8), PrefixCachePool([0, 1], 8, shared=False)
    for cache in (pool, alone):
        cache.insert([1, 2, 3], server=0)
    assert pool.lookup([1, 2, 3, 4], server=1).remote == {0: 3}
    found = alone.lookup([1, 2, 3, 4], server=1)
    assert found.hits == 0 and found.remote == {}
    assert alone.lookup([1, 2, 4], server=0).local == 2  # its own blocks still hit
    assert alone.stats()["shared"] is False


# ---- both experiments ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["agentic-sessions", "peak-burst"])
def test_the_experiment_fits_this_machine_in_at_most_six_short_runs(name):
    spec = load_spec(find_bundled(name))
    runs = expand(spec)
    assert 2 <= len(runs) <= 6
    assert all(r.resolved["duration_s"] <= 40 for r in runs)
    prepared = prepare(spec, runs, envelope=(DEFAULT, "test"))  # raises when it does not fit
    assert not any(p.plan.exceeded for p in prepared)


# ---- agentic-sessions ------------------------------------------------------------------------


def _run(est, router, cache):
    return est[f"router={router},{cache},seed=1"]


def test_every_turn_is_served_and_the_infinite_cache_is_the_same_yardstick(agentic):
    runs, est = agentic
    assert all(e["served"] == e["requests"] == 48 for e in est.values())
    ideal = {round(e["prefix_cache"]["ideal_hit_rate"], 6) for e in est.values()}
    assert len(ideal) == 1 and ideal.pop() > 0.75


def test_load_balancing_scatters_sessions_away_from_a_per_server_cache(agentic):
    _, est = agentic
    balanced = _run(est, "least_loaded", SERVER)["sessions"]["hit_rate"]["later_turns"]
    affine = _run(est, "kv_affinity", SERVER)["sessions"]["hit_rate"]["later_turns"]
    assert balanced < 0.6 < 0.9 < affine
    # and that is what the later turns wait for
    ttft = {
        r: _run(est, r, SERVER)["sessions"]["ttft_ms"]["later_turns"]["mean"]
        for r in ("least_loaded", "kv_affinity")
    }
    assert ttft["kv_affinity"] < 0.5 * ttft["least_loaded"]


def test_a_shared_pool_recovers_the_hits_over_the_fabric(agentic):
    _, est = agentic
    pooled = _run(est, "least_loaded", POOL)
    rates = pooled["prefix_cache"]
    assert rates["hit_rate"] > 0.95 * rates["ideal_hit_rate"]
    assert rates["remote_hit_rate"] > 0.2  # fetched from the server that held them
    assert pooled["network_bytes_real"] > 10 * _run(est, "kv_affinity", POOL)["network_bytes_real"]
    assert _run(est, "kv_affinity", POOL)["prefix_cache"]["remote_hit_rate"] < 0.05
    assert _run(est, "least_loaded", NONE)["prefix_cache"]["hit_rate"] == 0


# ---- peak-burst ------------------------------------------------------------------------------


def test_the_peaky_window_puts_18_percent_in_its_busiest_second(burst):
    _, est = burst
    for servers in ("[0]", "[0,1]"):
        peaky = est[f"pattern=peaky,servers={servers},seed=1"]["peak_second"]
        poisson = est[f"pattern=poisson,servers={servers},seed=1"]["peak_second"]
        assert peaky["peak"]["share"] == pytest.approx(0.18, rel=0.1)
        assert poisson["peak"]["share"] < 0.1
        assert peaky["mean_per_s"] == pytest.approx(poisson["mean_per_s"], rel=0.25)


def test_the_peak_seconds_requests_queue_and_a_second_server_absorbs_most_of_it(burst):
    _, est = burst
    one = est["pattern=peaky,servers=[0],seed=1"]["peak_second"]
    two = est["pattern=peaky,servers=[0,1],seed=1"]["peak_second"]
    assert one["peak"]["ttft_ms"]["p50"] > 2 * one["rest"]["ttft_ms"]["p50"]
    assert one["peak"]["requests_ahead"]["mean"] > 3 * one["rest"]["requests_ahead"]["mean"]
    assert two["peak"]["ttft_ms"]["p50"] < 0.6 * one["peak"]["ttft_ms"]["p50"]
    poisson = est["pattern=poisson,servers=[0],seed=1"]["peak_second"]
    assert poisson["peak"]["ttft_ms"]["p50"] < 0.6 * one["peak"]["ttft_ms"]["p50"]
