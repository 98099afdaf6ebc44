"""Checks for notebook 06 (batching)."""
from __future__ import annotations

import random

from ...engine.scheduler import admit as _reference  # the engine's own rule is the oracle
from .. import exercise


@exercise("06.admission")
def admission(fn) -> None:
    """`fn(waiting, free_blocks, block_size, free_slots, token_budget) -> list of prefill chunks`."""
    cases = [
        (([10, 10, 10], 5, 4, 8, 100), "blocks run out after the first request"),
        (([4, 4, 4], 10, 4, 2, 100), "only two batch slots are free"),
        (([6, 20, 5], 100, 4, 8, 16), "the token budget chunks the second prefill"),
        (([30, 1], 1, 16, 8, 64), "the first request does not fit: nobody is admitted (no skipping ahead)"),
        (([], 3, 16, 8, 64), "nobody is waiting"),
        (([3], 3, 16, 8, 0), "no token budget is left"),
        (([16, 17], 3, 16, 8, 64), "17 tokens need 2 blocks of 16"),
    ]
    rng = random.Random(6)
    for _ in range(40):
        waiting = [rng.randint(1, 60) for _ in range(rng.randint(0, 6))]
        cases.append(((waiting, rng.randint(0, 12), rng.choice([4, 8, 16]), rng.randint(0, 4),
                       rng.randint(0, 120)), "a random case"))
    for args, why in cases:
        expected = _reference(*args)
        found = fn(list(args[0]), *args[1:])
        found = list(found) if isinstance(found, (list, tuple)) else found
        assert found == expected, (
            f"admit(waiting={args[0]}, free_blocks={args[1]}, block_size={args[2]}, free_slots={args[3]}, "
            f"token_budget={args[4]}) ({why}): expected {expected}, found {found}")
