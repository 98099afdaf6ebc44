"""Checks for notebook 05 (CUDA graphs)."""
from __future__ import annotations

from course_kit import grading
from course_kit.cuda_graphs import pick_graph
from course_kit.grading.checks import feedback
from course_kit.grading.checks.codec import Raised

CASES = [([1, 3, 4, 5, 8], [1, 2, 4, 8]), ([5, 6, 2], [1, 2, 4, 6]), ([1, 7], [8]), ([2, 17, 31], [1, 16, 32]),
         ([3, 1], [4, 2, 1])]
TOO_BIG = ([9], [1, 2, 4, 8])

HINT = """For each batch, take the smallest captured size that is >= the batch (sort the sizes
first; `bisect` helps), and the padding is that size minus the batch. A batch larger than every
captured size has no graph: raise ValueError."""


@grading.exercise("05.padding", cases=lambda: CASES + [TOO_BIG], hint=HINT)
def padding(plan_fn) -> None:
    """plan_fn(batches, sizes) -> [(graph size, padding rows), ...]; ValueError for a batch too large."""
    for batches, sizes in CASES:
        expected = [(pick_graph(b, sizes), pick_graph(b, sizes) - b) for b in batches]
        found = plan_fn(batches, sizes)
        what = f"plan({batches}, sizes={sizes})"
        if not isinstance(found, (list, tuple)) or len(found) != len(batches):
            raise grading.Wrong(f"{what}: expected one (graph size, padding) pair per batch, found "
                                f"{feedback.describe(found)}", expected=expected)
        found = [tuple(x) if isinstance(x, (list, tuple)) else x for x in found]
        wrong = [i for i, (f, e) in enumerate(zip(found, expected)) if f != e]
        if wrong:
            raise grading.Wrong(f"{what}: the pair for batch {batches[wrong[0]]} is wrong "
                                f"(found {found[wrong[0]]!r})", expected=expected)
    try:
        plan_fn(*TOO_BIG)
    except feedback.StudentRaised as err:
        if isinstance(err.raised, Raised) and err.raised.type_name == "ValueError":
            return
        raise
    raise grading.Wrong("plan([9], sizes=[1, 2, 4, 8]): no captured graph holds 9 rows, so a ValueError "
                        "was expected, found no error")
