"""Checks for notebook 08 (flash attention): the online-softmax update and one tiled block step."""
from __future__ import annotations

import torch

from .. import exercise
from ...attention.naive import naive_attention
from ...attention.online_softmax import online_softmax_update
from ...attention.tiled import tiled_block_step


def _close(found, expected, what: str, tol: float = 1e-9) -> None:
    assert isinstance(found, torch.Tensor), f"{what}: expected a tensor, found {type(found).__name__}"
    assert found.shape == expected.shape, f"{what}: expected shape {tuple(expected.shape)}, found {tuple(found.shape)}"
    ok = torch.allclose(found.double(), expected.double(), rtol=tol, atol=tol, equal_nan=False)
    assert ok, (f"{what}: expected {expected.flatten()[:4].tolist()}..., found {found.flatten()[:4].tolist()}... "
                f"(max difference {(found.double() - expected.double()).abs().max().item():.3g})")


@exercise("08.online_update")
def online_update(fn) -> None:
    g = torch.Generator().manual_seed(8)
    x = torch.randn(3, 40, generator=g, dtype=torch.float64) * 30 + 500     # exp(x) overflows without a max
    m = torch.full((3,), float("-inf"), dtype=torch.float64)
    l = torch.zeros(3, dtype=torch.float64)
    m_ref, l_ref = m.clone(), l.clone()
    for start in range(0, 40, 7):
        block = x[:, start:start + 7]
        m, l = fn(m, l, block)
        m_ref, l_ref = online_softmax_update(m_ref, l_ref, block)
        _close(m, m_ref, f"running max after columns {start}..{start + block.shape[1] - 1}")
        _close(l, l_ref, f"running sum after columns {start}..{start + block.shape[1] - 1} "
                         "(did you rescale the old sum by exp(m_old - m_new)?)")
    expected_denominator = torch.exp(x - x.amax(-1, keepdim=True)).sum(-1)
    _close(l, expected_denominator, "final sum (the softmax denominator relative to the max)")


@exercise("08.tiled_block")
def tiled_block(fn) -> None:
    g = torch.Generator().manual_seed(80)
    q = torch.randn(2, 16, 8, generator=g, dtype=torch.float64)
    k = torch.randn(2, 40, 8, generator=g, dtype=torch.float64) * 3
    v = torch.randn(2, 40, 8, generator=g, dtype=torch.float64)
    scale = 8 ** -0.5
    m = torch.full((2, 16), float("-inf"), dtype=torch.float64)
    l = torch.zeros(2, 16, dtype=torch.float64)
    acc = torch.zeros(2, 16, 8, dtype=torch.float64)
    state_ref = (m.clone(), l.clone(), acc.clone())
    state = (m, l, acc)
    for start in range(0, 40, 16):
        kb, vb = k[:, start:start + 16], v[:, start:start + 16]
        found = fn(q, kb, vb, *state, scale)
        assert isinstance(found, tuple) and len(found) == 3, f"expected a tuple (m, l, acc), found {type(found).__name__}"
        state_ref = tiled_block_step(q, kb, vb, *state_ref, scale)
        for name, f, e in zip(("m", "l", "acc"), found, state_ref):
            _close(f, e, f"{name} after key block {start}..{start + kb.shape[1] - 1}")
        state = found
    _close(state[2] / state[1].unsqueeze(-1), naive_attention(q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0),
                                                              scale=scale)[0], "acc / l after all key blocks")
