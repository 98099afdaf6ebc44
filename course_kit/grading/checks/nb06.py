"""Checks for notebook 06 (batching): prefix-aware admission, and the step of the first preemption.

- 06.prefix_admit: the learner's rule sees the waiting prompts and the cached prefix blocks as data.
  The checker compares with fixed expected chunks: the named cases below, each derived by hand in
  its comment, and seeded random cases frozen with their answers (NN_RANDOM). Neither the engine
  nor a copy of the notebook's solution decides here, so the check does not move when the engine
  does; tests/test_exercises_nb06_tables.py checks that the engine's own BlockManager and `admit`
  still give these answers on the cache states they stand for.
- 06.first_preempt: predict, then measure with the engine, the step at which a given workload first
  preempts with a given number of KV blocks, and which request it preempts. The right step and
  request are in the instructor's answer key (instructor/hidden_checks/nb06.py, derived by hand
  there); this package checks their form.
"""
from __future__ import annotations

from typing import Any

from course_kit import grading
from course_kit.grading.checks import feedback, registry

# ---- 06.prefix_admit ----------------------------------------------------------------------------
# A case: ((waiting, cached, block_size, free_blocks, free_slots, token_budget), expected chunks).
# cached: (prefix, held) per cached full block, as the task describes it. S8 = tokens 1..8 (two
# blocks of 4). The engine's rules (the task's): a block is a hit while its whole prefix is cached,
# never the block of the last token; a hit costs no prefill, and no free block if a running request
# holds it; admit in order while a slot, some budget and blocks for the whole prompt are left.

S8 = list(range(1, 9))
P4, P8 = [1, 2, 3, 4], S8            # the two full-block prefixes of S8
NAMED = [
    # nothing cached, 8 free blocks: [1..5] needs 2 blocks and prefills 5; [6, 7] needs 1, prefills 2
    ("nothing cached", (([1, 2, 3, 4, 5], [6, 7]), [], 4, 8, 4, 64), [5, 2]),
    # running S8+[20] holds 3 of 6 blocks (3 free); S8+[30..34] (13 tokens, 4 blocks): blocks [1..4]
    # and [1..8] are held hits, [..33] is not cached; 4 - 2 held = 2 blocks <= 3; prefill 13 - 8 = 5
    ("a prefix held by a running request costs no block",
     (([*S8, 30, 31, 32, 33, 34],), [(P4, True), (P8, True)], 4, 3, 2, 64), [5]),
    # a finished S8+[20] left [1..4] and [1..8] cached but free; a filler holds the 4th block: 3 free.
    # The two hits are held by nobody, so they cost free blocks too: 4 blocks > 3, nobody admitted
    ("a cached prefix nobody holds still costs a free block",
     (([*S8, 30, 31, 32, 33, 34],), [(P8, False), (P4, False)], 4, 3, 2, 64), []),
    # running S8 holds 2 of 8 blocks; waiting S8 again: only [1..4] is a hit (the block of the last
    # token never is), held: 2 - 1 = 1 block; prefill 8 - 4 = 4
    ("the whole prompt is cached: its last block is computed again",
     ((list(S8),), [(P4, True), (P8, True)], 4, 6, 2, 64), [4]),
    # running 1..13 holds 4 of 10 blocks; waiting 1,2,3,4,99,6..13: [1..4] hits, the next block differs
    # (99): 1 held hit, 4 - 1 = 3 blocks <= 6; prefill 13 - 4 = 9
    ("a hit stops at the first block that differs",
     (([1, 2, 3, 4, 99, 6, 7, 8, 9, 10, 11, 12, 13],), [(P4, True), (P8, True), ([*S8, 9, 10, 11, 12], True)],
      4, 6, 2, 64), [9]),
    # running S8+[20] holds 3 of 8 blocks; waiting 77,2..8,30: its first block [77,2,3,4] is not cached,
    # so nothing after it is a hit either: 3 blocks <= 5, prefill all 9
    ("the same block after a different start is not a hit",
     (([77, 2, 3, 4, 5, 6, 7, 8, 30],), [(P4, True), (P8, True)], 4, 5, 2, 64), [9]),
    # a finished S8+[20] left [1..4], [1..8] cached, free; 5 free blocks. S8+[30]: 2 hits held by nobody:
    # 3 blocks (2 left), prefill 1; it now holds them, so S8+[40,41] has 2 held hits: 3 - 2 = 1 block,
    # prefill 10 - 8 = 2
    ("cached blocks the first admitted request took are held for the second",
     (([*S8, 30], [*S8, 40, 41]), [(P4, False), (P8, False)], 4, 5, 3, 64), [1, 2]),
    # nothing cached, 7 free: both 9-token prompts need 3 blocks; the second's prefix is not cached yet
    # (the first computes it in this very step): [9, 9]
    ("two waiting requests share a prefix nobody computed yet",
     (([50, 51, 52, 53, 54, 55, 56, 57, 58], [50, 51, 52, 53, 54, 55, 56, 57, 59]), [], 4, 7, 3, 64), [9, 9]),
    # running S8+S8 holds 4 of 9 blocks, all four prefixes cached; S8+S8+[40,41] (18 tokens): 4 held hits,
    # 5 - 4 = 1 block, prefill min(2, budget 3) = 2; then [60..62]: 1 block, prefill min(3, 1 left) = 1
    ("cached tokens need no budget",
     (([*S8, *S8, 40, 41], [60, 61, 62]),
      [(P4, True), (P8, True), ([*S8, 1, 2, 3, 4], True), ([*S8, *S8], True)], 4, 5, 3, 3), [2, 1]),
]

# Seeded random cache states (random.Random(6), tests/test_exercises_nb06_tables.py), frozen with the
# chunks the engine's BlockManager and `admit` gave, which the rule as the task states it gave too.
NN_RANDOM = [
    (([[25, 24, 12, 11, 25, 1, 9, 16, 26, 7, 24, 28, 14, 16, 27, 7, 17, 19, 21, 23, 29, 26, 17, 1], [16, 25, 9, 2, 1, 5, 22, 19, 14, 10, 12, 19, 4, 3, 17, 29, 22, 17, 7, 4, 20, 22, 9, 10, 24, 7, 13]], [([25, 24, 12, 11, 25, 1, 9, 16, 26, 7, 24, 28, 14, 18, 18, 22, 26, 20, 22, 3, 28, 14, 11, 3], False), ([25, 24, 12, 11, 25, 1, 9, 16], False), ([25, 24, 12, 11, 25, 1, 9, 16, 26, 7, 24, 28, 14, 18, 18, 22, 26, 20, 22, 3, 28, 14, 11, 3, 12, 26, 14, 26, 9, 15, 23, 4], False), ([25, 24, 12, 11, 25, 1, 9, 16, 26, 7, 24, 28, 14, 18, 18, 22], False)], 8, 13, 1, 64), [16]),
    (([[18, 29, 22, 20]], [([17, 1, 7, 25, 6, 1], True), ([17, 1, 7, 25, 6, 1, 10, 5, 22, 16], True), ([17, 1, 7, 25], True), ([17, 1, 7, 25, 6, 1, 12, 13], True), ([17, 1], True), ([17, 1, 7, 25, 6, 1, 10, 5], True)], 2, 11, 0, 64), []),
    (([], [([15, 16, 24, 26, 6, 1, 1, 18, 4, 9, 19, 26, 12, 7, 9, 17, 12, 22, 6, 20, 13, 23, 20, 9], False), ([15, 16, 24, 26, 6, 1, 1, 18, 4, 9, 19, 26, 12, 7, 9, 17, 24, 26, 6, 27, 10, 18, 1, 20], False), ([15, 16, 24, 26, 6, 1, 1, 18, 4, 9, 19, 26, 12, 7, 9, 17], False), ([15, 26, 27, 13, 26, 3, 17, 14], True), ([15, 16, 24, 26, 6, 1, 1, 18], False), ([15, 26, 27, 13, 26, 3, 17, 14, 16, 10, 23, 27, 14, 3, 7, 24], True), ([15, 26, 27, 13, 26, 3, 17, 14, 16, 10, 23, 27, 14, 3, 7, 24, 17, 9, 14, 29, 14, 20, 16, 9], True)], 8, 23, 2, 16), []),
    (([], [], 8, 13, 3, 200), []),
    (([[6, 20, 19, 3, 27, 26, 10], [12, 2, 3, 17, 28], [1, 23, 18, 5, 20, 27, 16, 23, 15, 12, 2]], [([1, 23, 18, 5, 20, 27, 16, 23, 1, 26], True), ([1, 23, 18, 5, 20, 27, 16, 25], False), ([1, 23, 18, 5, 20, 27, 16, 23], True), ([1, 23], True), ([1, 23, 18, 5, 20, 27, 27, 29], True), ([1, 23, 18, 5], True), ([1, 23, 18, 5, 20, 27], True)], 2, 19, 1, 64), [7]),
    (([[18, 24, 2, 24, 6, 11, 12, 2, 10, 24, 5, 17, 19]], [([18, 24, 2, 24, 6, 11, 12, 2, 18, 5, 15, 24, 16, 21, 3, 5], False), ([18, 24, 2, 24, 6, 11, 12, 2], False)], 8, 10, 1, 200), [5]),
    (([], [([5, 14, 23, 6, 25, 11, 8, 18, 19, 1, 26, 26, 19, 13, 7, 25, 11, 28, 13, 17, 15, 1, 13, 28], True), ([23, 8, 21, 18, 26, 24, 12, 9], False), ([5, 14, 23, 6, 25, 11, 8, 18, 19, 1, 26, 26, 19, 13, 7, 25], True), ([5, 14, 23, 6, 25, 11, 8, 18, 19, 1, 26, 26, 19, 13, 7, 25, 11, 28, 13, 17, 15, 1, 13, 28, 12, 20, 2, 2, 18, 8, 26, 14], False), ([5, 14, 23, 6, 25, 11, 8, 18], True), ([5, 14, 23, 6, 25, 11, 8, 18, 19, 1, 26, 26, 19, 13, 7, 25, 11, 28, 13, 17, 15, 1, 13, 28, 12, 20, 2, 2, 18, 8, 26, 14, 8, 25, 19, 23, 10, 3, 16, 3], False)], 8, 25, 5, 200), []),
    (([[26, 6, 19, 4, 17, 25, 16, 12, 29, 11, 27, 23]], [([17, 6, 4, 5], False), ([26, 6, 19, 4, 26, 26, 16, 7], True), ([17, 6, 4, 5, 28, 22, 12, 8, 1, 25, 10, 6], False), ([26, 6, 19, 4, 16, 16, 28, 28], True), ([17, 6, 4, 5, 20, 25, 8, 21], False), ([26, 6, 19, 4, 14, 9, 11, 5], False), ([26, 6, 19, 4, 26, 26, 16, 7, 27, 21, 29, 13], True), ([17, 6, 4, 5, 28, 22, 12, 8], False), ([26, 6, 19, 4], True), ([17, 6, 4, 5, 20, 25, 8, 21, 3, 7, 13, 14], False)], 4, 24, 2, 200), [8]),
    (([[12, 11, 6, 24, 27, 8, 6, 6, 8, 21, 5, 28, 16, 24], [24, 20, 5, 15, 26, 7, 19, 12], [21, 9, 3, 9, 25, 1, 2, 29, 21, 1, 16, 21, 15, 11, 2, 1, 9, 29, 24, 4, 13, 20], [27, 17, 17, 4, 26, 23, 25, 25, 27, 25, 5, 12], [27, 17, 17, 4, 26, 23, 25, 25, 13, 26, 1, 18, 29, 27, 5, 4, 15, 12, 1, 29, 5, 22, 18, 16, 9, 3, 16, 4, 13, 23, 7]], [], 8, 16, 1, 16), [14]),
    (([[19, 25, 21, 9, 9, 14, 13, 10, 12], [19, 25, 21, 9, 29, 2, 14, 21]], [([27, 5, 13, 8, 19, 12, 28, 7], True), ([19, 25, 21, 9], False), ([27, 5, 13, 8, 19, 12, 28, 7, 19, 8], True), ([27, 5], True), ([19, 25, 21, 9, 24, 4, 21, 2], False), ([27, 5, 13, 8], True), ([27, 5, 13, 8, 19, 12], True), ([19, 25], False), ([19, 25, 21, 9, 24, 4], False)], 2, 17, 2, 8), [5, 3]),
    (([[14, 8, 12, 16, 12]], [([21, 4, 18, 14], False), ([21, 4], False)], 2, 8, 5, 200), [5]),
    (([[25, 2, 21, 11, 12, 24]], [([14, 18, 20, 18, 21, 25, 21, 23], True), ([14, 18, 20, 18, 21, 25], True), ([3, 14, 28, 28], False), ([14, 18, 20, 18], True), ([3, 14, 28, 28, 23, 13], False), ([14, 18, 20, 18, 21, 25, 29, 6, 5, 22], True), ([14, 18, 20, 18, 21, 25, 29, 6], True), ([3, 14], False), ([14, 18], True), ([14, 18, 20, 18, 21, 25, 7, 7], False)], 2, 19, 3, 8), [6]),
    (([[5, 3, 8, 18, 9, 15, 20, 1, 28, 19, 25, 14, 13, 26], [27, 10, 26, 5, 20, 21, 20, 9, 21, 7, 20, 15, 17, 6, 21, 18, 6], [27, 10, 26, 5, 20, 21, 20, 9, 21, 7, 20, 15, 17, 6, 21, 18, 8, 10, 6, 9, 6, 20, 12, 12, 10, 19, 25, 8, 6, 3, 5, 19], [2, 4, 3, 27, 18, 2, 12, 12, 15, 13, 9, 17, 25, 8, 14, 19, 19, 14, 11, 29, 21, 15, 13, 26, 18, 18, 20, 26, 8]], [([5, 3, 8, 18, 9, 15, 20, 1, 11, 3, 24, 21, 17, 20, 12, 4], False), ([5, 3, 8, 18, 9, 15, 20, 1, 11, 3, 24, 21, 17, 20, 12, 4, 19, 20, 1, 8, 10, 20, 7, 7], False), ([5, 3, 8, 18, 9, 15, 20, 1], False), ([27, 10, 26, 5, 20, 21, 20, 9], False), ([27, 10, 26, 5, 20, 21, 20, 9, 21, 7, 20, 15, 17, 6, 21, 18, 2, 16, 13, 4, 12, 11, 5, 28, 10, 18, 1, 19, 9, 26, 25, 28], False), ([27, 10, 26, 5, 20, 21, 20, 9, 21, 7, 20, 15, 17, 6, 21, 18], False), ([27, 10, 26, 5, 20, 21, 20, 9, 21, 7, 20, 15, 17, 6, 21, 18, 2, 16, 13, 4, 12, 11, 5, 28], False)], 8, 9, 3, 200), [6, 1, 16]),
    (([[28, 10, 9, 13, 14, 21, 11, 15, 12, 7, 4, 19, 14, 28, 26, 9, 3, 8, 12, 17, 27, 28, 28, 27], [3, 24, 4]], [([4, 20, 17, 15, 11, 19, 20, 22, 6, 4, 23, 3, 4, 29, 7, 7, 25, 23, 25, 20, 4, 7, 16, 6], True), ([4, 20, 17, 15, 11, 19, 20, 22, 6, 4, 23, 3, 4, 29, 7, 7, 13, 15, 24, 22, 2, 7, 10, 19, 19, 21, 9, 27, 18, 24, 4, 19], False), ([4, 20, 17, 15, 11, 19, 20, 22, 6, 4, 23, 3, 4, 29, 7, 7], True), ([4, 20, 17, 15, 11, 19, 20, 22, 6, 4, 23, 3, 4, 29, 7, 7, 25, 23, 25, 20, 4, 7, 16, 6, 1, 1, 16, 22, 21, 22, 12, 8], True), ([4, 20, 17, 15, 11, 19, 20, 22], True), ([4, 20, 17, 15, 11, 19, 20, 22, 6, 4, 23, 3, 4, 29, 7, 7, 13, 15, 24, 22, 2, 7, 10, 19], False)], 8, 7, 4, 8), [8]),
    (([[3, 1, 24, 12, 18, 22, 6], [5, 29, 20, 25, 14, 9, 2, 19], [9, 6, 20, 16, 21, 21, 20, 25], [21], [5, 1, 7, 10, 4]], [([2, 5, 7, 1, 7, 23], False), ([2, 5], False), ([2, 5, 7, 1, 7, 23, 21, 1], False), ([2, 5, 7, 1], False)], 2, 6, 4, 200), [7]),
    (([[20, 21, 28, 26, 27, 22, 12, 4, 29, 21, 14, 19, 18, 21, 14, 3, 27, 12]], [([20, 21, 28, 26, 27, 22, 12, 4], False), ([20, 21, 28, 26, 27, 22, 12, 4, 29, 4, 20, 16, 1, 28, 11, 21], False), ([20, 21, 28, 26, 27, 22, 12, 4, 29, 4, 20, 16, 1, 28, 11, 21, 22, 8, 23, 6, 23, 4, 25, 18, 4, 4, 12, 4, 4, 29, 13, 20], False), ([20, 21, 28, 26, 27, 22, 12, 4, 29, 4, 20, 16, 1, 28, 11, 21, 22, 8, 23, 6, 23, 4, 25, 18], False), ([20, 21, 28, 26, 27, 22, 12, 4, 29, 4, 20, 16, 1, 28, 11, 21, 22, 8, 23, 6, 23, 4, 25, 18, 4, 4, 12, 4, 4, 29, 13, 20, 27, 3, 13, 18, 5, 10, 21, 15], False)], 8, 11, 4, 3), [3]),
    (([[22, 27, 20, 10, 7, 8, 16], [23, 12, 7, 18, 23, 24, 11, 25, 6, 26, 9, 14, 6, 15, 8, 14, 18, 12], [23, 12, 7, 18, 23, 24, 11, 25, 18, 1, 4]], [([23, 12, 7, 18, 23, 24, 11, 25], True), ([23, 12, 7, 18, 23, 24, 11, 25, 6, 26, 9, 14], True), ([23, 12, 7, 18], True)], 4, 8, 4, 200), [7, 6, 3]),
    (([[3, 29, 20, 25, 28, 2, 14, 27]], [([8, 28, 3, 7], False), ([8, 28, 3, 7, 24, 7, 6, 20], False), ([8, 28, 3, 7, 4, 18, 29, 21, 26, 16, 21, 9], False), ([8, 28, 3, 7, 4, 18, 29, 21], False), ([8, 28, 3, 7, 4, 18, 29, 21, 26, 16, 21, 9, 20, 29, 7, 16], False)], 4, 14, 5, 200), [8]),
    (([[10, 16, 28, 18, 4, 3, 27, 3], [18, 2, 25, 20, 29, 18, 14, 12, 29, 23, 16, 3, 24]], [([18, 2, 25, 20, 29, 18, 14, 12], False), ([8, 24, 17, 7], True), ([18, 2, 25, 20, 29, 18, 14, 12, 20, 8, 9, 24], False), ([18, 2, 25, 20], False), ([8, 24, 17, 7, 4, 20, 15, 27], True), ([18, 2, 25, 20, 29, 18, 14, 12, 20, 8, 9, 24, 2, 11, 15, 23], False), ([8, 24, 17, 7, 4, 20, 15, 27, 15, 8, 16, 17], True), ([8, 24, 17, 7, 4, 20, 15, 27, 15, 8, 16, 17, 10, 29, 7, 16], True)], 4, 21, 5, 8), [8]),
    (([[17, 10, 8, 23, 9, 5, 29, 18, 24, 29, 12, 29, 4], [22, 8, 21, 1, 14, 22, 24, 2, 25, 25, 4, 20, 23, 10], [22, 8, 21, 1, 14, 22, 24, 6, 13, 14, 8, 14, 27, 1, 18, 27, 23, 14, 21, 1, 15, 27], [22, 8, 21, 16, 19, 15, 16, 11, 15, 6, 23, 29, 26, 4, 20, 3, 15, 15, 23]], [([22, 8, 21, 1, 14, 22, 24, 2, 21, 6, 20, 8, 9, 1, 19, 29, 1, 15, 28, 7, 6, 15, 5, 22], False), ([22, 8, 21, 1, 14, 22, 24, 2, 5, 19, 26, 18, 6, 16, 28, 4], False), ([22, 8, 21, 1, 14, 22, 24, 2, 21, 6, 20, 8, 9, 1, 19, 29], False), ([22, 8, 21, 1, 14, 22, 24, 2, 21, 20, 21, 1, 16, 16, 5, 1], False), ([22, 8, 21, 1, 14, 22, 24, 2], True), ([22, 8, 21, 1, 14, 22, 24, 2, 21, 20, 21, 1, 16, 16, 5, 1, 8, 19, 28, 8, 19, 4, 14, 6], False)], 8, 18, 1, 16), [13]),
    (([[22, 2, 22, 23, 1, 1, 15, 28, 18, 7, 10, 15, 9], [16, 29, 18, 3, 18, 15, 15, 2], [16, 27, 29, 13, 8, 29, 7, 3, 19, 26, 14, 6, 4, 10, 3, 11, 22]], [([2, 28, 5, 16, 25, 7, 5, 13, 27, 29, 25, 11, 1, 19, 13, 25, 20, 5, 10, 12, 12, 27, 23, 3], False), ([16, 29, 18, 14, 7, 27, 9, 5, 23, 11, 23, 21, 25, 26, 21, 22, 13, 23, 21, 28, 26, 20, 16, 4], False), ([2, 28, 5, 16, 25, 7, 5, 13, 27, 29, 25, 11, 1, 19, 13, 25], False), ([16, 29, 18, 14, 7, 27, 9, 5], False), ([2, 28, 5, 16, 25, 7, 5, 13], False), ([16, 29, 18, 14, 7, 27, 9, 5, 23, 11, 23, 21, 25, 26, 21, 22], False)], 8, 16, 5, 3), [3]),
    (([[7, 19]], [([6, 27, 28, 15], False), ([11, 26, 5, 12, 12, 3], True), ([6, 27, 28, 15, 28, 3, 20, 14], False), ([11, 26, 5, 12], True), ([6, 27, 28, 15, 28, 3, 20, 14, 4, 16], False), ([6, 27], False), ([11, 26, 5, 12, 27, 22], True), ([6, 27, 28, 15, 28, 3], False), ([11, 26], True), ([6, 27, 28, 15, 20, 8], False)], 2, 24, 1, 3), [2]),
    (([[19, 19, 7, 1, 14, 2, 21, 3, 2, 23, 15, 24, 13, 29, 15, 18, 8, 3, 12]], [([19, 19, 7, 1, 14, 2, 21, 3, 2, 23, 15, 24, 7, 11, 6, 19], True), ([19, 19, 7, 1, 14, 2, 21, 3, 2, 23, 15, 24], True), ([28, 23, 23, 3], False), ([19, 19, 7, 1, 14, 2, 21, 3], True), ([28, 23, 23, 3, 21, 4, 5, 2], False), ([19, 19, 7, 1, 14, 2, 21, 3, 2, 23, 15, 24, 21, 19, 25, 21, 29, 4, 10, 23], True), ([19, 19, 7, 1, 14, 2, 21, 3, 2, 23, 15, 24, 21, 19, 25, 21], True), ([19, 19, 7, 1, 14, 2, 21, 3, 2, 23, 15, 24, 7, 11, 6, 19, 3, 1, 22, 20], True), ([19, 19, 7, 1], True), ([28, 23, 23, 3, 21, 4, 5, 2, 24, 24, 2, 9], False)], 4, 17, 5, 64), [7]),
    (([[10, 26, 16, 27, 5, 3, 23, 18, 5, 19, 1, 22, 27, 11, 17, 6, 20, 21, 8], [12, 3, 25, 1, 9, 9, 24, 8, 12, 10, 11, 23, 5, 25, 3, 11, 26, 19, 22, 4, 2, 28, 24, 27, 12, 2, 12, 13, 26, 23, 7, 15], [12, 3, 25, 1, 2, 27, 4, 13, 6, 27, 28, 26]], [([12, 3, 25, 1, 9, 9, 24, 8, 21, 16, 23, 15, 24, 6, 5, 14], True), ([12, 3, 25, 1, 9, 9, 24, 8, 21, 16, 23, 15, 24, 6, 5, 14, 15, 8, 23, 17, 18, 7, 13, 17], True), ([12, 3, 25, 1, 9, 9, 24, 8], True)], 8, 15, 5, 3), [3]),
]


def cases_of(table: list[tuple]) -> list[tuple[str, tuple, list[int]]]:
    """(name, arguments, expected) per case of a frozen table (lists, so each call gets fresh ones)."""
    out = []
    for name, (waiting, cached, *rest), want in table:
        args = ([list(w) for w in waiting], [(list(p), bool(h)) for p, h in cached], *rest)
        out.append((name, args, list(want)))
    return out


def public_cases() -> list[tuple[str, tuple, list[int]]]:
    return cases_of(NAMED + [("a random case", case, want) for case, want in NN_RANDOM])


def judge_prefix_admit(fn: Any, cases: list[tuple[str, tuple, list[int]]]) -> None:
    for name, args, expected in cases:
        found = fn(*args)
        found = list(found) if isinstance(found, (list, tuple)) else found
        what = (f"prefix_admit on {len(args[0])} waiting prompts, {len(args[1])} cached blocks, block_size "
                f"{args[2]}, free_blocks {args[3]}, free_slots {args[4]}, token_budget {args[5]} ({name})")
        if not isinstance(found, list):
            raise grading.Wrong(f"{what}: expected a list of prefill chunks, found {feedback.describe(found)}")
        if len(found) != len(expected):
            raise grading.Wrong(f"{what}: {len(found)} requests admitted, which is not the engine's count",
                                expected=expected)
        bad = [i for i, (f, e) in enumerate(zip(found, expected)) if f != e]
        if bad:
            raise grading.Wrong(f"{what}: the prefill chunk of admitted request {bad[0]} is wrong "
                                f"(found {found[bad[0]]!r})", expected=expected)


def _cases() -> list[tuple]:
    return [args for _, args, _ in public_cases()]


PREFIX_HINT = """For each prompt, walk its full blocks from the start: block i is a hit while
tokens[:(i+1)*block_size] is a cached prefix; stop at the first miss, and never count the block that
holds the last token (its logits are needed). Hit tokens need no prefill; hit blocks a running request
holds need no free block (the others do). Once a request is admitted, the cached blocks it took are
held. The rest is the admission rule of the lesson."""


@grading.exercise("06.prefix_admit", cases=_cases, hint=PREFIX_HINT)
def prefix_admit(fn) -> None:
    """fn(waiting, cached, block_size, free_blocks, free_slots, token_budget) -> prefill chunks."""
    judge_prefix_admit(fn, public_cases())


# ---- 06.first_preempt ---------------------------------------------------------------------------

PREEMPT_WORKLOAD = {"prompt_lens": [24, 40, 16, 32, 8, 48], "new_tokens": [40, 24, 48, 32, 56, 16],
                    "options": {"policy": "continuous", "max_num_seqs": 4, "block_size": 8, "num_blocks": 24,
                                "max_num_batched_tokens": 64}}


def preempt_prompts(vocab_size: int) -> list[list[int]]:
    """The workload's prompts, as the notebook's exercise cell builds them."""
    import torch
    g = torch.Generator().manual_seed(6)
    return [torch.randint(1, vocab_size, (n,), generator=g).tolist() for n in PREEMPT_WORKLOAD["prompt_lens"]]


PREEMPT_HINT = """Add the requests to an Engine built with the options given, then call
`engine.step()` one step at a time, counting, until `engine.scheduler.num_preemptions` becomes
positive. The sequences `add_request` returned carry `num_preemptions` each. For a prediction by
hand: count the blocks each running request holds as it grows, one token per decode step."""


def _int(value: Any, name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise grading.Wrong(f"{name}: expected an int, found {feedback.describe(value)}")
    if not low <= value <= high:
        raise grading.Wrong(f"{name}: {value} is outside {low}..{high}")
    return value


@grading.exercise("06.first_preempt", hint=PREEMPT_HINT, keyed="STEP and VICTIM")
def first_preempt(predicted, step, victim) -> None:
    """predicted, step: the step (counting from 1) of the first preemption; victim: its request's index.
    The right values are the instructor's answer key (registry.key)."""
    n = len(PREEMPT_WORKLOAD["prompt_lens"])
    wrong = feedback.Fields()
    with wrong.field():
        _int(predicted, "PREDICTED_STEP (recorded, not graded)", 1, 10_000)
    with wrong.field():
        _int(step, "STEP", 1, 10_000)
    with wrong.field():
        _int(victim, "VICTIM", 0, n - 1)
    wrong.done()
    key = registry.key("06.first_preempt")
    if key is None:
        return
    with wrong.field():
        feedback.expect(step == key["step"], "STEP: that is not the step at which the engine first preempts",
                        key["step"], step)
    with wrong.field():
        feedback.expect(victim == key["victim"], "VICTIM: that is not the request the engine preempts first",
                        key["victim"], victim)
    wrong.done()

