"""Checks for notebook 05 (CUDA graphs)."""
from __future__ import annotations

from ...cuda_graphs import pick_graph
from .. import exercise

CASES = [([1, 2, 4, 8], [1, 3, 4, 5, 8]), ([1, 2, 4, 6], [5, 6, 2]), ([8], [1, 7]), ([1, 16, 32], [2, 17, 31])]


@exercise("05.padding")
def padding(plan_fn) -> None:
    """plan_fn(batches, sizes) -> [(graph size, padding rows), ...]; ValueError for a batch too large."""
    for sizes, batches in CASES:
        expected = [(pick_graph(b, sizes), pick_graph(b, sizes) - b) for b in batches]
        found = plan_fn(batches, sizes)
        found = [tuple(x) for x in found] if isinstance(found, (list, tuple)) else found
        assert found == expected, (f"plan({batches}, sizes={sizes}): expected {expected} "
                                   f"(smallest captured size >= batch, and the rows added), found {found!r}")
    try:
        plan_fn([9], [1, 2, 4, 8])
    except ValueError:
        return
    raise AssertionError("plan([9], sizes=[1, 2, 4, 8]): expected a ValueError (no captured graph holds 9 rows), "
                         "found no error")
