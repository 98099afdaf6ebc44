"""Checks for notebook 07 (async streams): what overlap can gain, read from timelines.

- 07.async_bound: the learner turns a *sync* timeline of a step loop into the wall time of the same
  loop run async (the host prepares step k+1 while the device runs step k, one step ahead at most, its
  host work `slowdown` times longer), and the speed-up that gives. Checked on timelines it never saw
  against fixed answers: each named timeline's derived by hand in its comment, the seeded random
  ones' frozen (tests/test_exercises_nb04_07.py replays them event by event). No engine, no lesson
  code and no copy of the notebook's solution decides here.
- 07.overlap_predict: predict, then measure with `course_kit.streams.Timeline`, the GPU idle fractions,
  the bound and the speed-up of a given synthetic sync/async pair, and explain the gap. The measured
  values are in the instructor's answer key (instructor/hidden_checks/nb07.py, derived by hand).
"""
from __future__ import annotations

import math
import random
from typing import Any

from course_kit import grading
from course_kit.grading.checks import feedback, registry

# ---- 07.async_bound -----------------------------------------------------------------------------


def sync_timeline(host: list[float], dev: list[float], gaps: list[float], origin: float = 0.0) -> list[dict]:
    spans, t = [], origin
    for k, (c, g, gap) in enumerate(zip(host, dev, gaps)):
        spans.append({"lane": "cpu", "name": f"prepare {k}", "start_s": t, "end_s": t + c})
        spans.append({"lane": "gpu", "name": f"step {k}", "start_s": t + c, "end_s": t + c + g})
        t += c + g + gap
    return spans


def named_bound_cases() -> list[tuple[str, list[dict], float, float]]:
    """(name, sync spans, slowdown, async wall time in s) with the wall time derived by hand. With
    c = host and g = device time per step (ms), c' = c * slowdown: the host starts preparing step k
    when it prepared step k-1 and (k >= 2) step k-2 left the device; the device runs step k when it is
    prepared and step k-1 is done."""
    ms = 1e-3
    return [
        # c' = 0.6 < g = 1: the device never waits after step 0: 0.6 + 6 x 1.0 = 6.6 ms
        ("GPU-bound steps, host unchanged", sync_timeline([0.6 * ms] * 6, [1.0 * ms] * 6, [0.0] * 6), 1.0, 6.6 * ms),
        # c' = 0.75 < 1: 0.75 + 6 x 1.0 = 6.75 ms
        ("GPU-bound steps, host 25% slower in async", sync_timeline([0.6 * ms] * 6, [1.0 * ms] * 6, [0.0] * 6),
         1.25, 6.75 * ms),
        # c' = 2.2 > g = 0.5: the host never waits: 5 x 2.2 + 0.5 = 11.5 ms
        ("host-bound steps", sync_timeline([2.0 * ms] * 5, [0.5 * ms] * 5, [0.0] * 5), 1.1, 11.5 * ms),
        # c' = 1.2 > g = 1.0: host-bound in async: 8 x 1.2 + 1.0 = 10.6 ms
        ("host slower than the device only in async", sync_timeline([0.8 * ms] * 8, [1.0 * ms] * 8, [0.0] * 8),
         1.5, 10.6 * ms),
        # 0.3 x 1.2 + 0.7 = 1.06 ms (slower than the 1.0 ms sync window: speed-up below 1)
        ("one step", sync_timeline([0.3 * ms], [0.7 * ms], [0.0]), 1.2, 1.06 * ms),
        # the gaps do not exist in async: 0.4 + 5 x 0.9 = 4.9 ms (sync window 5 x 1.3 + 4 x 0.2 = 7.3 ms)
        ("idle gaps between sync steps, starting at t = 5 s",
         sync_timeline([0.4 * ms] * 5, [0.9 * ms] * 5, [0.2 * ms] * 5, origin=5.0), 1.0, 4.9 * ms),
        # prepared: 0.2, 1.7, 1.9, 3.5, 3.7, 5.3, 5.5, 7.1; done: 1.4, 2.0, 3.2, 3.8, 5.0, 5.6, 6.8, 7.4 ms
        ("steps alternating host-bound and device-bound",
         sync_timeline([0.2 * ms, 1.5 * ms] * 4, [1.2 * ms, 0.3 * ms] * 4, [0.0] * 8), 1.0, 7.4 * ms),
    ]


def random_bound_cases(seed: int, walls: list[float]) -> list[tuple[str, list[dict], float, float]]:
    """Seeded random timelines (shuffled: the order of the spans carries nothing), with their frozen
    async wall times `walls`, one per timeline."""
    ms, out = 1e-3, []
    rng = random.Random(seed)
    for i, wall in enumerate(walls):
        n = rng.randint(2, 12)
        host = [rng.uniform(0.1, 2.0) * ms for _ in range(n)]
        dev = [rng.uniform(0.1, 2.0) * ms for _ in range(n)]
        gaps = [rng.choice([0.0, rng.uniform(0.0, 0.3) * ms]) for _ in range(n)]
        spans = sync_timeline(host, dev, gaps, origin=rng.uniform(0.0, 2.0))
        rng.shuffle(spans)
        out.append((f"random timeline {i + 1} ({n} steps, shuffled)", spans, rng.choice([1.0, 1.2, 1.6, 2.5]), wall))
    return out


# The async wall times of random_bound_cases(7, ...), replayed event by event when they were frozen
# (tests/test_exercises_nb04_07.py replays them again).
RANDOM_WALLS = [0.013954036309966486, 0.012226622033749246, 0.00778945613527382, 0.017654738820044487,
                0.023815393418767174, 0.02773664579713031]


def bound_cases() -> list[tuple[str, list[dict], float, float]]:
    return named_bound_cases() + random_bound_cases(7, RANDOM_WALLS)


def _window(spans: list[dict]) -> float:
    return max(s["end_s"] for s in spans) - min(s["start_s"] for s in spans)


def judge_bound(fn: Any, named: list[tuple[str, list[dict], float, float]]) -> None:
    for name, spans, slowdown, wall in named:
        what = f"async_bound on {name}, slowdown {slowdown:g}"
        found = fn(spans, slowdown)
        if not (isinstance(found, tuple) and len(found) == 2):
            raise grading.Wrong(f"{what}: expected a tuple (async_wall_s, speedup), found {feedback.describe(found)}")
        wrong = feedback.Fields()
        with wrong.field():
            feedback.number(found[0], wall, f"{what}: async wall time", rel=1e-6)
        with wrong.field():
            feedback.number(found[1], _window(spans) / wall, f"{what}: speed-up", rel=1e-6)
        wrong.done()


def _bound_cases() -> list[tuple]:
    return [(spans, slowdown) for _, spans, slowdown, _ in bound_cases()]


BOUND_HINT = """Pair the spans by step number: c[k] from "prepare k", g[k] from "step k". Track two
clocks: when the host finishes preparing step k (it may start once it finished step k-1's preparation
and step k-2 has left the device), and when the device finishes step k (once step k is prepared and
step k-1 is done). Host work takes slowdown * c[k]. The speed-up divides the sync timeline's window
(last end - first start) by the async wall time."""


@grading.exercise("07.async_bound", cases=_bound_cases, hint=BOUND_HINT)
def async_bound(fn) -> None:
    """fn(sync spans, slowdown) -> (async wall time in s, speed-up over the sync window)."""
    judge_bound(fn, bound_cases())


# ---- 07.overlap_predict -------------------------------------------------------------------------


def predict_pair() -> tuple[list[dict], list[dict]]:
    """The sync and async timelines of 07.overlap_predict, exactly as the notebook's cell builds them
    (tests/test_exercises_nb04_07.py keeps the two the same)."""
    ms, steps = 1e-3, 10
    sync, async_ = [], []
    for k in range(steps):
        t = 1.6 * k
        sync += [{"lane": "cpu", "name": f"prepare {k}", "start_s": t * ms, "end_s": (t + 0.6) * ms},
                 {"lane": "gpu", "name": f"step {k}", "start_s": (t + 0.6) * ms, "end_s": (t + 1.6) * ms}]
        start = 0.0 if k == 0 else k - 0.25
        async_ += [{"lane": "cpu", "name": f"prepare {k}", "start_s": start * ms, "end_s": (start + 0.75) * ms},
                   {"lane": "gpu", "name": f"step {k}", "start_s": (k + 0.75) * ms, "end_s": (k + 1.75) * ms}]
    return sync, async_


CAUSES = "ABCD"   # which one is right only the hidden checker knows (instructor/hidden_checks/nb07.py)

PREDICT_HINT = """`Timeline.from_records(spans)` gives `.idle_fraction("gpu")`,
`.overlap_speedup_bound(["cpu", "gpu"])` and `.window()`. For the cause, compare the two lanes' busy
times in sync and async, and look at what the GPU lane does before its first step in async."""

MEASURED = (("idle_sync", "IDLE_SYNC, the GPU idle fraction in sync"),
            ("idle_async", "IDLE_ASYNC, the GPU idle fraction in async"),
            ("bound", "BOUND, the speed-up bound read from the sync timeline"),
            ("speedup", "SPEEDUP, the measured speed-up of async over sync"))


@grading.exercise("07.overlap_predict", hint=PREDICT_HINT, later="CAUSE",
                  keyed="IDLE_SYNC, IDLE_ASYNC, BOUND and SPEEDUP")
def overlap_predict(predicted, idle_sync, idle_async, bound, speedup, cause) -> None:
    wrong = feedback.Fields()
    with wrong.field():
        if not (isinstance(predicted, dict) and predicted):
            raise grading.Wrong(f"PREDICTED (recorded, not graded) must be a dict of your predicted numbers, found "
                                f"{feedback.describe(predicted)}")
    found = dict(zip((k for k, _ in MEASURED), (idle_sync, idle_async, bound, speedup)))
    for k, what in MEASURED:
        with wrong.field():
            v = found[k]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise grading.Wrong(f"{what}: expected a finite number, found {feedback.describe(v)}")
            if k.startswith("idle") and not 0 <= v <= 1:
                raise grading.Wrong(f"{what}: {v:.6g} is not a fraction between 0 and 1")
    with wrong.field():
        feedback.choice(cause, "CAUSE", CAUSES)
    wrong.done()
    key = registry.key("07.overlap_predict")
    if key is None:
        return
    for k, what in MEASURED:
        with wrong.field():
            feedback.number(found[k], key[k], what, rel=1e-6)
    wrong.done()
