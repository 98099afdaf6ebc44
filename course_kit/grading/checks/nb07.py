"""Checks for notebook 07 (async streams): what overlap can gain, read from timelines.

- 07.async_bound: the learner turns a *sync* timeline of a step loop into the wall time of the same
  loop run async (the host prepares step k+1 while the device runs step k, one step ahead at most, its
  host work `slowdown` times longer), and the speed-up that gives. Checked on seeded timelines it never
  saw against an event-by-event replay of that loop.
- 07.overlap_predict: predict, then measure with `course_kit.streams.Timeline`, the GPU idle fractions,
  the bound and the speed-up of a given synthetic sync/async pair, and explain the gap.
"""
from __future__ import annotations

import random
from typing import Any

from course_kit import grading
from course_kit.grading.checks import feedback
from course_kit.streams.timeline import Timeline

# ---- 07.async_bound -----------------------------------------------------------------------------


def _steps(spans: list[dict]) -> tuple[list[float], list[float]]:
    """Host and device seconds per step, from spans named "prepare k" (cpu) and "step k" (gpu)."""
    host, dev = {}, {}
    for s in spans:
        k = int(s["name"].split()[-1])
        (host if s["lane"] == "cpu" else dev)[k] = s["end_s"] - s["start_s"]
    n = len(dev)
    return [host[k] for k in range(n)], [dev[k] for k in range(n)]


def replay_async(spans: list[dict], slowdown: float) -> float:
    """The oracle: replay the async loop event by event. The host thread prepares step k, queues it,
    then (from step 1 on) blocks until step k-1's tokens are back before it prepares step k+1; the
    device runs queued steps in order. Returns the wall time from the first preparation."""
    host, dev = _steps(spans)
    host_clock, device_free, queue_done = 0.0, 0.0, []
    for k in range(len(dev)):
        host_clock += host[k] * slowdown                     # prepare step k
        start = max(device_free, host_clock)                 # queued: runs when the device is free
        device_free = start + dev[k]
        queue_done.append(device_free)
        if k >= 1:                                           # wait for step k-1, then postprocess it
            host_clock = max(host_clock, queue_done[k - 1])
    return device_free


def sync_timeline(host: list[float], dev: list[float], gaps: list[float], origin: float = 0.0) -> list[dict]:
    spans, t = [], origin
    for k, (c, g, gap) in enumerate(zip(host, dev, gaps)):
        spans.append({"lane": "cpu", "name": f"prepare {k}", "start_s": t, "end_s": t + c})
        spans.append({"lane": "gpu", "name": f"step {k}", "start_s": t + c, "end_s": t + c + g})
        t += c + g + gap
    return spans


def bound_cases(seed: int = 7) -> list[tuple[str, list[dict], float]]:
    """Named timelines, then seeded random ones (shuffled: the order of the spans carries nothing)."""
    ms = 1e-3
    out = [
        ("GPU-bound steps, host unchanged", sync_timeline([0.6 * ms] * 6, [1.0 * ms] * 6, [0.0] * 6), 1.0),
        ("GPU-bound steps, host 25% slower in async", sync_timeline([0.6 * ms] * 6, [1.0 * ms] * 6, [0.0] * 6), 1.25),
        ("host-bound steps", sync_timeline([2.0 * ms] * 5, [0.5 * ms] * 5, [0.0] * 5), 1.1),
        ("host slower than the device only in async", sync_timeline([0.8 * ms] * 8, [1.0 * ms] * 8, [0.0] * 8), 1.5),
        ("one step", sync_timeline([0.3 * ms], [0.7 * ms], [0.0]), 1.2),
        ("idle gaps between sync steps, starting at t = 5 s",
         sync_timeline([0.4 * ms] * 5, [0.9 * ms] * 5, [0.2 * ms] * 5, origin=5.0), 1.0),
        ("steps alternating host-bound and device-bound",
         sync_timeline([0.2 * ms, 1.5 * ms] * 4, [1.2 * ms, 0.3 * ms] * 4, [0.0] * 8), 1.0),
    ]
    rng = random.Random(seed)
    for i in range(6):
        n = rng.randint(2, 12)
        host = [rng.uniform(0.1, 2.0) * ms for _ in range(n)]
        dev = [rng.uniform(0.1, 2.0) * ms for _ in range(n)]
        gaps = [rng.choice([0.0, rng.uniform(0.0, 0.3) * ms]) for _ in range(n)]
        spans = sync_timeline(host, dev, gaps, origin=rng.uniform(0.0, 2.0))
        rng.shuffle(spans)
        out.append((f"random timeline {i + 1} ({n} steps, shuffled)", spans, rng.choice([1.0, 1.2, 1.6, 2.5])))
    return out


def judge_bound(fn: Any, named: list[tuple[str, list[dict], float]]) -> None:
    for name, spans, slowdown in named:
        what = f"async_bound on {name}, slowdown {slowdown:g}"
        found = fn(spans, slowdown)
        if not (isinstance(found, tuple) and len(found) == 2):
            raise grading.Wrong(f"{what}: expected a tuple (async_wall_s, speedup), found {feedback.describe(found)}")
        wall = replay_async(spans, slowdown)
        lo, hi = Timeline.from_records(spans).window()
        feedback.number(found[0], wall, f"{what}: async wall time", rel=1e-6)
        feedback.number(found[1], (hi - lo) / wall, f"{what}: speed-up", rel=1e-6)


def _bound_cases() -> list[tuple]:
    return [(spans, slowdown) for _, spans, slowdown in bound_cases()]


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
    """The sync and async timelines of 07.overlap_predict, exactly as the notebook's cell builds them."""
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


def predict_answers() -> dict[str, float]:
    sync, async_ = (Timeline.from_records(t) for t in predict_pair())
    wall = lambda tl: tl.window()[1] - tl.window()[0]   # noqa: E731
    return {"idle_sync": sync.idle_fraction("gpu"), "idle_async": async_.idle_fraction("gpu"),
            "bound": sync.overlap_speedup_bound(["cpu", "gpu"]), "speedup": wall(sync) / wall(async_)}


PREDICT_HINT = """`Timeline.from_records(spans)` gives `.idle_fraction("gpu")`,
`.overlap_speedup_bound(["cpu", "gpu"])` and `.window()`. For the cause, compare the two lanes' busy
times in sync and async, and look at what the GPU lane does before its first step in async."""


@grading.exercise("07.overlap_predict", hint=PREDICT_HINT, later="CAUSE")
def overlap_predict(predicted, idle_sync, idle_async, bound, speedup, cause) -> None:
    if not (isinstance(predicted, dict) and predicted):
        raise grading.Wrong(f"PREDICTED (recorded, not graded) must be a dict of your predicted numbers, found "
                            f"{feedback.describe(predicted)}")
    truth = predict_answers()
    feedback.number(idle_sync, truth["idle_sync"], "IDLE_SYNC, the GPU idle fraction in sync", rel=1e-6)
    feedback.number(idle_async, truth["idle_async"], "IDLE_ASYNC, the GPU idle fraction in async", rel=1e-6)
    feedback.number(bound, truth["bound"], "BOUND, the speed-up bound read from the sync timeline", rel=1e-6)
    feedback.number(speedup, truth["speedup"], "SPEEDUP, the measured speed-up of async over sync", rel=1e-6)
    feedback.choice(cause, "CAUSE", CAUSES)
