"""One query row of flash attention, block by block: the running max, sum and output after each.

Notebook 08's tiles widget steps through this: a query row meets its keys BLOCK_N at a time and
folds each block into (m, l, acc) with `online_softmax.online_softmax_update`, the same fold the
tiled forward uses. After block t the row's output so far is acc / l, the exact attention over the
keys seen so far; after the last block it is the row of softmax(q Kᵀ·scale) V.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from .online_softmax import online_softmax_update


@dataclass
class RowWalk:
    """scores: the row's scaled scores over its visible keys; steps: the state after each key block;
    exact: the row of softmax(scores) @ V computed in one go (float64)."""
    scores: list[float]
    block_n: int
    steps: list[dict] = field(default_factory=list)
    exact: list[float] = field(default_factory=list)


def row_walk(q_row: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_n: int,
             visible: int | None = None, scale: float | None = None) -> RowWalk:
    """Fold one query row's keys in blocks of `block_n`. q_row: [D]; k, v: [S, D].

    visible: how many keys the row may see (causal: its position + 1; default all S). Each step
    holds block, start, end, m, l, the rescale factor alpha applied to what was summed before,
    out = acc / l, and err = max |out - out after all visible keys|. Computed in float64.
    """
    if q_row.dim() != 1 or k.dim() != 2 or v.shape != k.shape or k.shape[1] != q_row.shape[0]:
        raise ValueError(f"q_row must be [D] and k, v [S, D]; got {tuple(q_row.shape)}, {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")
    if not isinstance(block_n, int) or block_n < 1:
        raise ValueError(f"block_n must be an integer >= 1; got {block_n!r}")
    s = k.shape[0]
    visible = s if visible is None else visible
    if not 1 <= visible <= s:
        raise ValueError(f"visible must be in [1, {s}]; got {visible}")
    scale = 1.0 / math.sqrt(q_row.shape[0]) if scale is None else scale
    q64, k64, v64 = q_row.double(), k[:visible].double(), v[:visible].double()
    scores = (k64 @ q64) * scale
    exact = torch.softmax(scores, 0) @ v64
    m = torch.tensor(float("-inf"), dtype=torch.float64)
    l = torch.tensor(0.0, dtype=torch.float64)
    acc = torch.zeros(q_row.shape[0], dtype=torch.float64)
    walk = RowWalk(scores=scores.tolist(), block_n=block_n, exact=exact.tolist())
    for block, start in enumerate(range(0, visible, block_n)):
        end = min(start + block_n, visible)
        m_old = m
        m, l, acc = online_softmax_update(m, l, scores[start:end], acc, v64[start:end])
        alpha = 0.0 if math.isinf(m_old.item()) else math.exp(m_old.item() - m.item())
        out = acc / l
        walk.steps.append({"block": block, "start": start, "end": end, "m": m.item(), "l": l.item(),
                           "alpha": alpha, "out": out.tolist(), "err": (out - exact).abs().max().item()})
    return walk
