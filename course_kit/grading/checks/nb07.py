"""Checks for notebook 07 (async streams)."""
from __future__ import annotations

import random

from course_kit import grading
from course_kit.grading.checks import feedback
from course_kit.streams.timeline import Timeline


def _cases() -> list[tuple]:
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
    return [(spans,) for spans in cases]


HINT = """The window runs from the earliest start to the latest end over all spans. GPU busy time is
the length of the union of the GPU spans (sort them and merge overlaps, so overlapping spans count
once). Idle fraction = 1 - busy / window. The speed-up bound is window / the busy time of the
busiest lane (CPU or GPU)."""


@grading.exercise("07.idle_bound", cases=_cases, hint=HINT)
def idle_bound(fn) -> None:
    for i, (spans,) in enumerate(_cases()):
        tl = Timeline.from_records(spans)
        what = (f"timeline {i + 1} ({len(spans)} spans"
                + (", overlapping GPU spans" if i == 1 else ", shuffled" if i > 1 else "") + ")")
        found = fn(spans)
        if not (isinstance(found, tuple) and len(found) == 2):
            raise grading.Wrong(f"{what}: expected a tuple (gpu_idle_fraction, speedup_bound), found "
                                f"{feedback.describe(found)}")
        feedback.number(found[0], tl.idle_fraction("gpu"), f"{what}: GPU idle fraction", rel=1e-6, abs_=1e-9)
        feedback.number(found[1], tl.overlap_speedup_bound(["cpu", "gpu"]), f"{what}: speed-up bound", rel=1e-6)
