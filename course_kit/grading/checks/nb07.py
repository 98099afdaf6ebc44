"""Checks for notebook 07 (async streams)."""
from __future__ import annotations

import math
import random

from .. import exercise
from ...streams.timeline import Timeline


def _cases() -> list[list[dict]]:
    """Hand-made timelines plus random ones: overlapping spans, idle at both ends, a CPU-bound loop."""
    cases = [
        [{"lane": "cpu", "name": "prepare 0", "start_s": 0.0, "end_s": 1.0},
         {"lane": "gpu", "name": "step 0", "start_s": 1.0, "end_s": 3.0},
         {"lane": "cpu", "name": "prepare 1", "start_s": 3.0, "end_s": 4.0},
         {"lane": "gpu", "name": "step 1", "start_s": 4.0, "end_s": 6.0}],
        [{"lane": "gpu", "name": "step 0", "start_s": 0.0, "end_s": 2.0},
         {"lane": "gpu", "name": "copy 0", "start_s": 1.0, "end_s": 2.5},   # overlaps: count once
         {"lane": "cpu", "name": "prepare 1", "start_s": 0.5, "end_s": 4.0}],  # CPU-bound
    ]
    rng = random.Random(7)
    for _ in range(4):
        spans, t = [], 0.0
        for k in range(6):
            c, g = rng.uniform(0.1, 1.0), rng.uniform(0.1, 1.0)
            spans.append({"lane": "cpu", "name": f"prepare {k}", "start_s": t, "end_s": t + c})
            gs = t + c + rng.uniform(0.0, 0.3)
            spans.append({"lane": "gpu", "name": f"step {k}", "start_s": gs, "end_s": gs + g})
            t = gs + g + rng.uniform(0.0, 0.2)
        rng.shuffle(spans)   # the order of the list must not matter
        cases.append(spans)
    return cases


@exercise("07.idle_bound")
def idle_bound(fn) -> None:
    for spans in _cases():
        tl = Timeline.from_records(spans)
        idle = tl.idle_fraction("gpu")
        bound = tl.overlap_speedup_bound(["cpu", "gpu"])
        found = fn([dict(s) for s in spans])
        assert isinstance(found, tuple) and len(found) == 2, (
            f"expected a tuple (gpu_idle_fraction, speedup_bound), found {found!r}")
        f_idle, f_bound = found
        assert math.isclose(f_idle, idle, rel_tol=1e-6, abs_tol=1e-9), (
            f"GPU idle fraction: expected {idle:.6f} (1 - GPU busy time / whole window, overlapping "
            f"GPU spans counted once), found {f_idle!r} for spans {spans}")
        assert math.isclose(f_bound, bound, rel_tol=1e-6), (
            f"speed-up bound: expected {bound:.6f} (window / busy time of the busiest lane), "
            f"found {f_bound!r} for spans {spans}")
