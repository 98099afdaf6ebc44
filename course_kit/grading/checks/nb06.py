"""Checks for notebook 06 (batching)."""
from __future__ import annotations

import random

from course_kit import grading
from course_kit.engine.scheduler import admit as reference  # the engine's own rule is the oracle

NAMED = [
    (([10, 10, 10], 5, 4, 8, 100), "blocks run out after the first request"),
    (([4, 4, 4], 10, 4, 2, 100), "only two batch slots are free"),
    (([6, 20, 5], 100, 4, 8, 16), "the token budget chunks the second prefill"),
    (([30, 1], 1, 16, 8, 64), "the first request does not fit: nobody is admitted (no skipping ahead)"),
    (([], 3, 16, 8, 64), "nobody is waiting"),
    (([3], 3, 16, 8, 0), "no token budget is left"),
    (([16, 17], 3, 16, 8, 64), "17 tokens need 2 blocks of 16"),
    (([17], 1, 16, 8, 64), "one token past a block boundary needs one more block"),
]


def _cases() -> list[tuple]:
    cases = [args for args, _ in NAMED]
    rng = random.Random(6)
    for _ in range(40):
        waiting = [rng.randint(1, 60) for _ in range(rng.randint(0, 6))]
        cases.append((waiting, rng.randint(0, 12), rng.choice([4, 8, 16]), rng.randint(0, 4), rng.randint(0, 120)))
    return cases


HINT = """Walk the waiting list in order. A request is admitted only if a slot is free, some token
budget is left and its *whole* prompt fits in the free blocks (ceil(tokens / block_size)); its
chunk is min(tokens, budget left). Stop at the first request that does not fit: no skipping ahead."""


@grading.exercise("06.admission", cases=_cases, hint=HINT)
def admission(fn) -> None:
    """`fn(waiting, free_blocks, block_size, free_slots, token_budget) -> list of prefill chunks`."""
    why = {repr(args): text for args, text in NAMED}
    for args in _cases():
        expected = reference(*args)
        found = fn(*args)
        found = list(found) if isinstance(found, (list, tuple)) else found
        grading.expect(found == expected,
                       f"admit(waiting={args[0]}, free_blocks={args[1]}, block_size={args[2]}, "
                       f"free_slots={args[3]}, token_budget={args[4]}) ({why.get(repr(args), 'a random case')})",
                       expected, found)
