"""Hidden check of notebook 05: choose_buckets on other seeded traces (heavier load, larger k) and
edge cases: a single step, and every batch size once."""
from __future__ import annotations

from course_kit import grading
from course_kit.grading.checks.nb05 import _trace, judge_buckets


def _named() -> list[tuple[str, list[int], int]]:
    out = [("a single step", [5], 3), ("every batch size once", list(range(1, 21)), 5),
           ("two sizes, k = 2", [4] * 9 + [9] * 2, 2)]
    for i, (rate, lens, max_batch, k) in enumerate([(25, (5, 40), 12, 2), (70, (4, 60), 32, 5),
                                                     (20, (1, 100), 16, 6), (90, (2, 20), 20, 3)]):
        out.append((f"hidden trace {i + 1} (max batch {max_batch}, k = {k})",
                    _trace(500 + i, 250, rate, lens, max_batch), k))
    return out


@grading.exercise("05.choose_buckets_hidden", cases=lambda: [(b, k) for _, b, k in _named()])
def choose_buckets_hidden(fn) -> None:
    judge_buckets(fn, _named())


# ---- 05.bucket_waste: the answer key ---
# Measured with buckets.bucket_cost on the task's trace (waste_trace(): 300 requests, Poisson at 10/s,
# seed 5) and the sizes [1, 2, 4, 8]; tests/test_answer_keys.py measures it again.
grading.answer_key("05.bucket_waste", waste=0.18962477965248048, worst=8, extra=5)
