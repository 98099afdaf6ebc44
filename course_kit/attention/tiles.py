"""Which (query block, key block) tiles a flash-attention kernel computes, and which it skips.

The course's Triton kernel (triton_flash.py, notebook 08) gives each program one block of BLOCK_M
queries and walks the keys in blocks of BLOCK_N, in two phases: whole blocks every query of the
block may see (**no mask**, the hot loop), then the blocks that cross the causal diagonal or the
ragged end of the sequence (**masked**). With a causal mask, key blocks past the block's last
query are never loaded (**skipped**). This module reproduces that split in plain Python, so the
figure of causal tiles, the tiles widget and the IO counts (io_complexity.py) all read one rule.
"""
from __future__ import annotations

SKIPPED, FULL, MASKED = "skipped", "no mask", "masked"
STATES = (FULL, MASKED, SKIPPED)


def _check(seq_len: int, block_m: int, block_n: int) -> None:
    for name, value in (("seq_len", seq_len), ("block_m", block_m), ("block_n", block_n)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1; got {value!r}")


def tile_grid(seq_len: int, block_m: int, block_n: int, causal: bool = True) -> list[list[str]]:
    """grid[i][j]: what the kernel does with query block i and key block j (SKIPPED, FULL or MASKED).

    Mirrors the kernel's bounds: causal keys run to min(S, (i+1)·BLOCK_M), of which whole blocks
    below the block's first query are unmasked; without a mask every key is visited and only a
    ragged last key block needs bounds checks.
    """
    _check(seq_len, block_m, block_n)
    n_m, n_n = -(-seq_len // block_m), -(-seq_len // block_n)
    grid = []
    for i in range(n_m):
        kv_end = min(seq_len, (i + 1) * block_m) if causal else seq_len
        full_end = min(seq_len, i * block_m) if causal else seq_len
        full_end = (full_end // block_n) * block_n          # whole blocks only; the rest is masked
        row = []
        for j in range(n_n):
            k0 = j * block_n
            row.append(SKIPPED if k0 >= kv_end else FULL if k0 + block_n <= full_end else MASKED)
        grid.append(row)
    return grid


def tile_counts(grid: list[list[str]]) -> dict[str, int]:
    """How many tiles of each kind: {"no mask": .., "masked": .., "skipped": ..}."""
    return {state: sum(row.count(state) for row in grid) for state in STATES}


def visited_key_rows(seq_len: int, block_m: int, block_n: int, causal: bool = True) -> list[int]:
    """Per query block, how many key rows the kernel loads (K and V each): the rows of its computed tiles.

    A ragged last key block loads only the rows that exist (the pointer loader masks the others;
    TMA reads zeros for them without touching memory).
    """
    grid = tile_grid(seq_len, block_m, block_n, causal)
    return [sum(min(block_n, seq_len - j * block_n) for j, state in enumerate(row) if state != SKIPPED)
            for row in grid]


def computed_fraction(seq_len: int, block_m: int, block_n: int, causal: bool = True) -> float:
    """Fraction of the S x S score entries inside computed tiles (1.0 without a mask; about 1/2 causal)."""
    rows = visited_key_rows(seq_len, block_m, block_n, causal)
    sizes = [min(block_m, seq_len - i * block_m) for i in range(len(rows))]
    return sum(m * r for m, r in zip(sizes, rows)) / seq_len ** 2
