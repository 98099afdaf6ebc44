"""Checks for notebook 03 (torch.compile modes)."""
from __future__ import annotations

from typing import Callable

import torch

from .. import exercise


def _reference(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """forward_with_branch without its print: what the fixed function must compute."""
    h = torch.relu(x @ w)
    if h.mean() > 1.0:
        h = h / h.mean()
    return h @ w.T


@exercise("03.fullgraph")
def check_fullgraph(fixed: Callable) -> None:
    """`fixed(x, w)` must compile with fullgraph=True (no graph break) and compute what
    forward_with_branch computes, on inputs that take either side of its branch."""
    from ...compile_modes.graphs import compiles_fullgraph
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(16, 32, generator=g), torch.randn(32, 64, generator=g)
    ok, err = compiles_fullgraph(fixed, x, w)
    if not ok:
        raise AssertionError(f"expected fixed(x, w) to compile with fullgraph=True, found a graph break: {err}")
    for scale in (1.0, 0.01):  # mean activation above 1, then below 1
        xs = x * scale
        want, got = _reference(xs, w), fixed(xs, w)
        if not torch.allclose(got, want, rtol=1e-5, atol=1e-5):
            raise AssertionError(f"expected the same output as forward_with_branch (mean activation "
                                 f"{float(torch.relu(xs @ w).mean()):.3f}); found a max difference of "
                                 f"{(got - want).abs().max().item():.3g}")
