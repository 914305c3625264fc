"""Analytic estimates printed beside the measurement: what queueing theory, link
arithmetic or the compute model predicts for a run, from the same resolved spec.

``estimate(resolved, fabric)`` returns a JSON-able dict (``{"what": ..., ...}``) or
None when no estimate applies. The runner stores it as ``summary.json.estimate``
and the report shows it next to the measured numbers.
"""

from __future__ import annotations

from typing import Any

from topologies import Fabric


def estimate(resolved: dict[str, Any], fabric: Fabric) -> dict[str, Any] | None:
    """The analytic prediction for a run, or None."""
    return None
