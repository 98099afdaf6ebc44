"""Which work item each program of the persistent Gluon forward (gluon_flash.py) takes, and how
much work that leaves each program: pure arithmetic, no GPU, shown in notebook 08.

An item is one (batch x head, query tile) pair; its causal work is the K/V tiles up to its
diagonal. The tile shape is the kernel's: BLOCK_M query rows, BLOCK_N keys.
"""
from __future__ import annotations

import torch

BLOCK_M = 128          # query rows a program owns: 64 per computing warpgroup
BLOCK_N = 128          # keys a K/V tile holds
_order_tables: dict[tuple, torch.Tensor] = {}


def persistent_order(n_items: int, programs: int, snake: bool = True) -> list[int]:
    """The work item each slot of a launch takes: program p's r-th item is order[r * programs + p].

    Taken round-robin (order[n] = n), a persistent program's causal items are all heavy or all
    light: an item's weight repeats every `seq_len / BLOCK_M` items (`_work` numbers each head's
    heaviest items first) and the programs step by their count, so some programs get more work
    than others and the kernel waits for the slowest (`program_key_blocks`). In snake order every
    other round goes backwards over the programs, which pairs a heavy item with a light one. One
    program an item has a single round, which snake order leaves as it is.
    """
    if n_items < 1 or programs < 1:
        raise ValueError(f"n_items and programs must be >= 1; got {n_items} and {programs}")
    order = []
    for start in range(0, n_items, programs):
        this_round = list(range(start, min(start + programs, n_items)))
        backwards = snake and (start // programs) % 2 == 1
        order += this_round[::-1] if backwards else this_round
    return order


def program_key_blocks(seq_len: int, batch_heads: int, programs: int, causal: bool,
                       snake: bool = True, block_m: int = BLOCK_M, block_n: int = BLOCK_N) -> list[int]:
    """K/V tiles each program of a launch multiplies through, self-attention at this shape:
    what sets how long the slowest program (and so the kernel) runs."""
    n_tiles_m = seq_len // block_m
    n_items = n_tiles_m * batch_heads
    programs = min(programs, n_items)
    work = [0] * programs
    for slot, item in enumerate(persistent_order(n_items, programs, snake)):
        start_m = n_tiles_m - 1 - item % n_tiles_m       # as _work numbers a head's items: heaviest first
        work[slot % programs] += start_m * block_m // block_n + 1 if causal else seq_len // block_n
    return work


def order_table(n_items: int, programs: int, snake: bool, device: torch.device) -> torch.Tensor:
    """persistent_order as the int32 table the kernel reads, built once per launch shape."""
    key = (n_items, programs, snake, device)
    if key not in _order_tables:
        _order_tables[key] = torch.tensor(persistent_order(n_items, programs, snake), dtype=torch.int32,
                                          device=device)
    return _order_tables[key]
