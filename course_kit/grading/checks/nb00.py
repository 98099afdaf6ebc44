"""Checks for notebook 00 (the roofline)."""
from __future__ import annotations

from course_kit import grading
from course_kit.grading.checks import feedback

# (intensity FLOP/B, bandwidth GB/s, peak TFLOP/s) on both sides of the ridge and exactly on it.
CASES = [(0.25, 4800.0, 990.0), (1.0, 320.0, 65.0), (206.25, 4800.0, 990.0), (1000.0, 4800.0, 990.0),
         (10.0, 2039.0, 312.0)]

HINT = """Below the ridge a kernel is limited by memory: it gets `intensity x bandwidth` FLOP/s
(GB/s times FLOP/B is GFLOP/s, so divide by 1e3 for TFLOP/s). Above it, by the peak. The attainable
rate is the smaller of the two."""


@grading.exercise("00.attainable", cases=lambda: CASES, hint=HINT)
def attainable(fn) -> None:
    for intensity, bw, peak in CASES:
        side = "below" if intensity * bw / 1e3 < peak else "at or above"
        feedback.number(fn(intensity, bw, peak), min(peak, intensity * bw / 1e3),
                        f"attainable_tflops({intensity}, {bw}, {peak}) ({side} the ridge)", rel=1e-6)
