"""Checks for notebook 00."""
from __future__ import annotations

import math

from .. import exercise


@exercise("00.attainable")
def attainable(fn) -> None:
    # (intensity FLOP/B, bandwidth GB/s, peak TFLOP/s) on both sides of the ridge and exactly on it.
    cases = [(0.25, 4800.0, 990.0), (1.0, 320.0, 65.0), (206.25, 4800.0, 990.0), (1000.0, 4800.0, 990.0),
             (10.0, 2039.0, 312.0)]
    for intensity, bw, peak in cases:
        expected = min(peak, intensity * bw / 1e3)
        found = fn(intensity, bw, peak)
        assert isinstance(found, (int, float)) and math.isclose(found, expected, rel_tol=1e-6), (
            f"attainable_tflops({intensity}, {bw}, {peak}): expected {expected:.4g} TFLOP/s "
            f"(min of the peak and intensity x bandwidth), found {found!r}")
