"""Checks for notebook 05 (CUDA graphs): choosing the graph batch sizes (buckets) for a trace.

- 05.choose_buckets: the learner's `choose_buckets(batches, k)` is run on seeded traces it never
  saw; its sizes must cover every batch and pad no more rows than the best choice, found here by
  brute force over every set of k sizes.
- 05.bucket_waste: predict, then measure, the padding waste of the notebook's buckets on a trace
  it never showed, and explain it: the bucket that pads most, and the one size to add. The
  measured values are the instructor's answer key (instructor/hidden_checks/nb05.py).
"""
from __future__ import annotations

import random
from collections import Counter
from itertools import combinations

from course_kit.cuda_graphs import buckets
from course_kit import grading
from course_kit.grading.checks import feedback, registry



# ---- 05.choose_buckets --------------------------------------------------------------------------

def padding_rows(batches: list[int], sizes: list[int]) -> int:
    """Rows padded over the trace when every step replays the smallest size that holds it."""
    cost = buckets.bucket_cost(batches, sizes, {1: 1.0}, {1: 1.0})
    if cost["eager_fallback_steps"]:
        raise ValueError("a batch is larger than every size")
    return cost["padding_rows"]


def best_padding(batches: list[int], k: int) -> int:
    """The fewest padding rows any k sizes give (brute force: every set of k-1 sizes below the
    largest batch, which every valid choice must hold)."""
    counts = Counter(batches)
    top = max(counts)
    below = sorted(b for b in counts if b < top)
    best = None
    for extra in combinations(below, min(k - 1, len(below))):
        sizes = sorted(extra) + [top]
        pad = sum(n * (sizes[next(i for i, s in enumerate(sizes) if s >= b)] - b) for b, n in counts.items())
        best = pad if best is None else min(best, pad)
    return best


def _trace(seed: int, n: int, rate: float, out_len: tuple[int, int], max_batch: int) -> list[int]:
    rng = random.Random(seed)
    t, arrivals = 0.0, []
    for _ in range(n):
        t += rng.expovariate(rate)
        arrivals.append(t)
    lens = [rng.randint(*out_len) for _ in range(n)]
    return buckets.batch_trace(arrivals, lens, max_batch=max_batch, step_s=0.01)


def _named_cases() -> list[tuple[str, list[int], int]]:
    return [
        ("one batch size only", [3] * 7, 2),
        ("as many sizes as batch sizes: no padding needed", [1, 2, 2, 5, 7, 7, 7], 4),
        ("k = 1: one graph must hold every batch", [1, 4, 2, 6, 6, 3], 1),
        ("most steps at the odd sizes", [3] * 10 + [5] * 8 + [7] * 6 + [8, 2, 1], 3),
        ("powers of two would be wrong here", [5] * 20 + [6] * 20 + [12] * 3 + [13] * 30, 3),
        ("more sizes allowed than batch sizes", [2, 9, 9, 4], 6),
    ]


def _traces() -> list[tuple[str, list[int], int]]:
    """Seeded traces from the slot simulation of buckets.batch_trace: light to heavy load."""
    out = []
    for i, (rate, lens, max_batch, k) in enumerate([(10, (5, 60), 8, 3), (15, (5, 60), 8, 4), (30, (5, 80), 16, 4),
                                                     (110, (2, 30), 24, 4), (60, (10, 90), 32, 3)]):
        out.append((f"trace {i + 1} (max batch {max_batch}, k = {k})", _trace(50 + i, 300, rate, lens, max_batch), k))
    return out


def _cases() -> list[tuple]:
    return [(batches, k) for _, batches, k in _named_cases() + _traces()]


def judge_buckets(fn, named: list[tuple[str, list[int], int]]) -> None:
    for name, batches, k in named:
        what = f"choose_buckets on {name} ({len(batches)} steps, k = {k})"
        found = fn(batches, k)
        if not isinstance(found, (list, tuple)) or not found:
            raise grading.Wrong(f"{what}: expected a non-empty list of batch sizes, found {feedback.describe(found)}")
        if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in found):
            bad = next(s for s in found if not (isinstance(s, int) and not isinstance(s, bool) and s >= 1))
            raise grading.Wrong(f"{what}: every size must be an int >= 1, found {bad!r} ({type(bad).__name__})")
        if len(set(found)) > k:
            raise grading.Wrong(f"{what}: {len(set(found))} different sizes, more than the k = {k} allowed")
        if max(found) < max(batches):
            raise grading.Wrong(f"{what}: the largest size, {max(found)}, does not hold every batch of the trace")
        best = best_padding(batches, k)
        pad = padding_rows(batches, list(found))
        if pad != best:
            raise grading.Wrong(f"{what}: your sizes pad {pad} rows; another choice of {k} sizes pads fewer",
                        expected=best)


BUCKETS_HINT = """Only the distinct batch sizes and how often each occurs matter, and the best
sizes can always be taken among the batch sizes (the largest one must be chosen). Sort the distinct
sizes; let cost(i, j) be the padding when sizes i+1..j all replay the graph of size j. Then
best[j][c] = min over i of best[i][c-1] + cost(i, j): a dynamic program over (last size, sizes used)."""


@grading.exercise("05.choose_buckets", cases=_cases, hint=BUCKETS_HINT)
def choose_buckets(fn) -> None:
    """fn(batches, k) -> at most k sizes that hold every batch with the fewest padding rows."""
    judge_buckets(fn, _named_cases() + _traces())


# ---- 05.bucket_waste ----------------------------------------------------------------------------

WASTE_SIZES = [1, 2, 4, 8]


def waste_trace() -> list[int]:
    """The trace of 05.bucket_waste, exactly as the notebook's exercise cell builds it."""
    from course_kit.engine import trace
    arrivals = trace.poisson_arrivals(300, 10.0, seed=5)
    lens = [r.max_new_tokens for r in trace.synthetic(300, (1, 1), (5, 60), 100, seed=5)]
    return buckets.batch_trace(arrivals, lens, max_batch=8, step_s=0.01)


WASTE_HINT = """`buckets.bucket_cost(UNSEEN, SIZES, eager_ms, graph_ms)` needs step times only for
its time columns: any {batch: ms} dict will do for the padding. Its "steps" list says, per step, the
graph replayed and the padding rows: add the padding up per graph. For EXTRA, try each size not in
SIZES and keep the one whose padding rows are fewest."""


@grading.exercise("05.bucket_waste", hint=WASTE_HINT, keyed="WASTE, WORST_BUCKET and EXTRA")
def bucket_waste(predicted, waste, worst, extra) -> None:
    """predicted, waste: fractions of computed rows that are padding; worst, extra: batch sizes."""
    wrong = feedback.Fields()
    for name, value in (("PREDICTED_WASTE (recorded, not graded)", predicted), ("WASTE", waste)):
        with wrong.field():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
                shown = value if isinstance(value, (int, float)) and not isinstance(value, bool) else \
                    feedback.describe(value)
                raise grading.Wrong(f"{name} must be a fraction between 0 and 1, found {shown}")
    with wrong.field():
        if isinstance(worst, bool) or not isinstance(worst, int) or worst not in WASTE_SIZES:
            raise grading.Wrong(f"WORST_BUCKET: expected one of the sizes {WASTE_SIZES} (an int), found "
                                f"{worst!r:.40}")
    with wrong.field():
        if isinstance(extra, bool) or not isinstance(extra, int) or extra in WASTE_SIZES or not 1 <= extra <= 8:
            raise grading.Wrong(f"EXTRA: expected a batch size from 1 to 8 not in {WASTE_SIZES}, found {extra!r:.40}")
    wrong.done()
    truth = registry.key("05.bucket_waste")
    if truth is None:
        return
    with wrong.field():
        feedback.number(waste, truth["waste"], "WASTE, the padding waste of SIZES on the unseen trace", rel=1e-6)
    for name, value, key, what in (("WORST_BUCKET", worst, "worst", "the bucket whose steps pad the most rows"),
                                   ("EXTRA", extra, "extra", "the one size to add that removes the most padding")):
        with wrong.field():
            feedback.expect(value == truth[key], f"{name}: that is not {what}", truth[key], value)
    wrong.done()


# ---- 05.read_trace ------------------------------------------------------------------------------
# The learner reads one decode step of a profiler trace (the H200's, or the package's synthetic step
# until one is recorded) and answers from it. This public checker checks the answers' form only; the
# values are judged by the instructor's hidden checker (instructor/hidden_checks/nb05.py), whose
# oracle a learner cannot read.

FIXES = {"A": "CUDA graphs", "B": "fusion", "C": "a batch twice as large"}


def trace_table(trace_id: str) -> list[dict]:
    """The table an answer was computed from (by `profiling.step_table.step_id`), or Wrong."""
    from course_kit.profiling import step_table
    tables = step_table.candidates()
    if not isinstance(trace_id, str) or trace_id not in tables:
        raise grading.Wrong("TRACE_ID: not the id of the table this notebook loads "
                            "(it is `step_table.step_id(STEP)`, printed above the exercise)")
    return tables[trace_id]


READ_HINT = """The rows run one after another on one stream. The step spans from the first start to the
last end; the gaps are the stretches between one kernel's end and the next one's start. Add the
time of each kernel name over the step for DOMINANT. For each fix, compute the step's new span
from the rows as the task describes, then the speed-up in tokens per second (a batch twice as large
also makes twice the tokens per step)."""


@grading.exercise("05.read_trace", hint=READ_HINT, later="DOMINANT, GAP_SHARE, FIX and GAIN")
def read_trace(trace_id, dominant, gap_share, fix, gain) -> None:
    rows = trace_table(trace_id)
    names = {r["name"] for r in rows}
    if not isinstance(dominant, str) or dominant not in names:
        raise grading.Wrong(f"DOMINANT: expected the name of a kernel of the step (a str from STEP's "
                            f"'name' column), found {feedback.describe(dominant) if not isinstance(dominant, str) else repr(dominant[:60])}")
    for what, value, lo, hi in (("GAP_SHARE, the share of the step's span with no kernel running", gap_share, 0.0, 1.0),
                                ("GAIN, the speed-up in tokens per second of the best fix", gain, 1.0, float("inf"))):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
            raise grading.Wrong(f"{what}: expected a number, found {feedback.describe(value)}")
        if not lo <= value < hi:
            raise grading.Wrong(f"{what}: {value:.4g} is outside [{lo:g}, {hi:g})")
    feedback.choice(fix, "FIX", FIXES)
