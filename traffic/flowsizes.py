"""Published datacenter flow-size distributions, as CDF points, and a sampler.

Both are the empirical CDFs as commonly encoded in the pFabric (Alizadeh et
al., SIGCOMM 2013) and HPCC (Li et al., SIGCOMM 2019) simulators; sizes are
bytes, between points the CDF is linear (so are the samples):

- ``web_search``: the web-search cluster measured in DCTCP (Alizadeh et al.,
  "Data Center TCP (DCTCP)", SIGCOMM 2010). Mean 1.71 MB.
- ``data_mining``: the data-mining cluster measured in VL2 (Greenberg et al.,
  "VL2: A Scalable and Flexible Data Center Network", SIGCOMM 2009). Most
  flows are tiny, 2 % are 100 MB-1 GB and carry most of the bytes (mean
  12.7 MB), so its offered load converges slowly: short runs overshoot or
  undershoot the target.
"""

from __future__ import annotations

import numpy as np

# (bytes, cumulative probability); first probability 0, last 1.
FLOW_SIZE_CDFS: dict[str, tuple[tuple[float, float], ...]] = {
    "web_search": (
        (0, 0.0),
        (10_000, 0.15),
        (20_000, 0.20),
        (30_000, 0.30),
        (50_000, 0.40),
        (80_000, 0.53),
        (200_000, 0.60),
        (1_000_000, 0.70),
        (2_000_000, 0.80),
        (5_000_000, 0.90),
        (10_000_000, 0.97),
        (30_000_000, 1.0),
    ),
    "data_mining": (
        (0, 0.0),
        (180, 0.1),
        (216, 0.2),
        (560, 0.3),
        (900, 0.4),
        (1_100, 0.5),
        (1_870, 0.6),
        (3_160, 0.7),
        (10_000, 0.8),
        (400_000, 0.9),
        (3_160_000, 0.95),
        (100_000_000, 0.98),
        (1_000_000_000, 1.0),
    ),
}


class FlowSizeError(ValueError):
    """An unknown distribution name."""


def _points(distribution: str) -> tuple[np.ndarray, np.ndarray]:
    try:
        cdf = FLOW_SIZE_CDFS[distribution]
    except KeyError:
        raise FlowSizeError(
            f"unknown flow-size distribution {distribution!r}; known: {', '.join(FLOW_SIZE_CDFS)}"
        ) from None
    sizes, probs = zip(*cdf, strict=True)
    return np.asarray(sizes, dtype=float), np.asarray(probs, dtype=float)


def mean_flow_bytes(distribution: str) -> float:
    """Mean of the piecewise-linear CDF: each segment contributes its midpoint."""
    sizes, probs = _points(distribution)
    return float(np.sum(np.diff(probs) * (sizes[:-1] + sizes[1:]) / 2))


def sample_flow_bytes(distribution: str, rng: np.random.Generator, count: int) -> np.ndarray:
    """``count`` flow sizes (int64 bytes, at least 1) by inverse-CDF sampling."""
    sizes, probs = _points(distribution)
    drawn = np.interp(rng.random(count), probs, sizes)
    return np.maximum(np.rint(drawn), 1).astype(np.int64)
