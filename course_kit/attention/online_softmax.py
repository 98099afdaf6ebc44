"""Online softmax: compute softmax in one pass with a running max and a rescaled running sum.

softmax(x)_i = exp(x_i - m) / sum_j exp(x_j - m), with m = max(x) for numerical safety. The usual
code needs three passes over x (max, sum, normalise). The online form keeps, after seeing
x_1..x_t, the running max m_t and the running sum l_t = sum_{j<=t} exp(x_j - m_t). A new element
(or block) x' updates them as

    m_new = max(m_t, max(x'))
    l_new = l_t * exp(m_t - m_new) + sum(exp(x' - m_new))

The factor exp(m_t - m_new) <= 1 rescales the old sum to the new max. At the end, l is the
denominator. Flash attention applies the same rescaling to its running output P V
(`online_softmax_update` with acc and values: the one PyTorch fold of the course).
"""
from __future__ import annotations

import math

import torch


def online_softmax_row(x: list[float] | torch.Tensor) -> tuple[torch.Tensor, list[tuple[float, float]]]:
    """Softmax of one row, one element at a time. Returns (probabilities, [(m_t, l_t) after each element])."""
    values = [float(v) for v in (x.tolist() if isinstance(x, torch.Tensor) else x)]
    if not values:
        raise ValueError("x must have at least one element; got an empty row")
    m, l = float("-inf"), 0.0
    history: list[tuple[float, float]] = []
    for v in values:
        m_new = max(m, v)
        # exp(-inf - finite) = 0, so the first element simply starts the sum at 1
        l = l * math.exp(m - m_new) + math.exp(v - m_new)
        m = m_new
        history.append((m, l))
    probs = torch.tensor([math.exp(v - m) / l for v in values], dtype=torch.float64)
    return probs, history


def online_softmax_update(m: torch.Tensor, l: torch.Tensor, x_block: torch.Tensor,
                          acc: torch.Tensor | None = None, v_block: torch.Tensor | None = None
                          ) -> tuple[torch.Tensor, ...]:
    """One step of the recurrence for a block of new scores along the last dim.

    m, l: running max and running sum, shape [...] (m = -inf and l = 0 before the first block).
    x_block: the new scores, shape [..., n]; -inf marks a masked score. Returns the updated (m, l).

    Flash attention also carries acc = sum P V, the unnormalised output [..., D]: pass it with the
    block's values v_block [..., n, D] and get (m, l, acc) back, acc rescaled by the same factor as
    l. Every PyTorch attention in the course folds its blocks through here (tiled.py, and ring
    attention in parallel/context.py); the Triton kernels share triton_softmax.online_softmax_fold.
    """
    m_new = torch.maximum(m, x_block.amax(dim=-1))
    # where m_new is still -inf (a fully masked block so far), keep the rescale at 0 rather than NaN
    safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
    alpha = torch.exp(m - safe)                                  # rescales what was summed so far
    p = torch.exp(x_block - safe.unsqueeze(-1))
    l_new = l * alpha + p.sum(dim=-1)
    if acc is None:
        return m_new, l_new
    return m_new, l_new, acc * alpha.unsqueeze(-1) + p @ v_block


def blockwise_softmax(x: torch.Tensor, block: int) -> torch.Tensor:
    """Softmax over the last dim, reading x in blocks of `block` columns: one pass for (m, l), then normalise."""
    if block < 1:
        raise ValueError(f"block must be >= 1; got {block}")
    m = torch.full(x.shape[:-1], float("-inf"), dtype=x.dtype, device=x.device)
    l = torch.zeros(x.shape[:-1], dtype=x.dtype, device=x.device)
    for start in range(0, x.shape[-1], block):
        m, l = online_softmax_update(m, l, x[..., start:start + block])
    return torch.exp(x - m.unsqueeze(-1)) / l.unsqueeze(-1)
