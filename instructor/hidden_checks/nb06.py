"""Hidden check of notebook 06: prefix_admit on other seeded cache states, and block size 1 (every
token a block: only the last token is always computed)."""
from __future__ import annotations

from course_kit import grading
from course_kit.grading.checks.nb06 import case_of, judge_prefix_admit, specs

EDGE = [
    ("block size 1, whole prompt cached", {"block_size": 1, "num_blocks": 12, "running": [[3, 4, 5, 6]],
                                           "finished": [], "fillers": 0, "waiting": [[3, 4, 5, 6], [3, 4, 9]],
                                           "free_slots": 3, "budget": 10}),
    ("a finished prompt asked again, nothing free but its own blocks",
     {"block_size": 2, "num_blocks": 3, "running": [], "finished": [[7, 8, 9, 10, 11]], "fillers": 0,
      "waiting": [[7, 8, 9, 10, 11]], "free_slots": 1, "budget": 1}),
]


def _named():
    return EDGE + specs(seed=66, n=40)[8:]


@grading.exercise("06.prefix_admit_hidden", cases=lambda: [case_of(s) for _, s in _named()])
def prefix_admit_hidden(fn) -> None:
    judge_prefix_admit(fn, _named())
