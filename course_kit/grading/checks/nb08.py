"""Checks for notebook 08 (flash attention): the online-softmax update and one tiled block step.

The oracles are the definitions, in float64: after columns 0..j the running max is the max of
those columns and the running sum is sum(exp(x - max)) over them; likewise for the tiled state.
Every step is probed from the *right* previous state, so one wrong step cannot hide behind another.
"""
from __future__ import annotations

import torch

from course_kit import grading
from course_kit.grading.checks import feedback

_TOL = 1e-9


def _update_cases() -> list[tuple]:
    g = torch.Generator().manual_seed(8)
    x = torch.randn(3, 40, generator=g, dtype=torch.float64) * 30 + 500     # exp(x) overflows without a max
    cases = []
    m = torch.full((3,), float("-inf"), dtype=torch.float64)
    l = torch.zeros(3, dtype=torch.float64)
    for start in range(0, 40, 7):
        cases.append((m.clone(), l.clone(), x[:, start:start + 7].clone()))
        seen = x[:, :start + 7]
        m = seen.amax(-1)
        l = torch.exp(seen - m.unsqueeze(-1)).sum(-1)
    return cases


UPDATE_HINT = """The new max is the larger of the old max and this block's max. The old sum was taken
relative to the old max, so rescale it by exp(m_old - m_new) before adding this block's
sum(exp(x_block - m_new)). Start values are m = -inf and l = 0: exp(-inf) is 0, which is right."""


@grading.exercise("08.online_update", cases=_update_cases, hint=UPDATE_HINT)
def online_update(fn) -> None:
    for m, l, block in _update_cases():
        got = fn(m, l, block)
        if not (isinstance(got, tuple) and len(got) == 2):
            raise grading.Wrong(f"online_update: expected a tuple (m, l), found {feedback.describe(got)}")
        first = bool(torch.isinf(m).all())
        where = "the first block" if first else f"a block of {block.shape[-1]} columns after earlier blocks"
        m_ref = torch.maximum(m, block.amax(-1))
        l_ref = l * torch.exp(m - m_ref) + torch.exp(block - m_ref.unsqueeze(-1)).sum(-1)
        feedback.tensor(got[0], m_ref, f"running max on {where}", rtol=_TOL, atol=0)
        feedback.tensor(got[1], l_ref, f"running sum on {where} (rescaled by exp(m_old - m_new)?)",
                        rtol=_TOL, atol=0)


def _block_cases() -> list[tuple]:
    g = torch.Generator().manual_seed(80)
    q = torch.randn(2, 16, 8, generator=g, dtype=torch.float64)
    k = torch.randn(2, 40, 8, generator=g, dtype=torch.float64) * 3
    v = torch.randn(2, 40, 8, generator=g, dtype=torch.float64)
    scale = 8 ** -0.5
    m = torch.full((2, 16), float("-inf"), dtype=torch.float64)
    l = torch.zeros(2, 16, dtype=torch.float64)
    acc = torch.zeros(2, 16, 8, dtype=torch.float64)
    cases = []
    for start in range(0, 40, 16):
        kb, vb = k[:, start:start + 16].clone(), v[:, start:start + 16].clone()
        cases.append((q, kb, vb, m.clone(), l.clone(), acc.clone(), scale))
        s = q @ k[:, :start + 16].transpose(-2, -1) * scale   # everything seen so far, at once
        m = s.amax(-1)
        p = torch.exp(s - m.unsqueeze(-1))
        l, acc = p.sum(-1), p @ v[:, :start + 16]
    return cases


BLOCK_HINT = """Scores s = q_blk @ k_blk^T * scale. New max m_new = max(m, s.amax(-1)); the rescale
factor alpha = exp(m - m_new). p = exp(s - m_new[..., None]). Then l_new = l * alpha + p.sum(-1)
and acc_new = acc * alpha[..., None] + p @ v_blk. Normalising (acc / l) happens only at the end."""


@grading.exercise("08.tiled_block", cases=_block_cases, hint=BLOCK_HINT)
def tiled_block(fn) -> None:
    for i, (q, kb, vb, m, l, acc, scale) in enumerate(_block_cases()):
        got = fn(q, kb, vb, m, l, acc, scale)
        if not (isinstance(got, tuple) and len(got) == 3):
            raise grading.Wrong(f"block_step: expected a tuple (m, l, acc), found {feedback.describe(got)}")
        s = q @ kb.transpose(-2, -1) * scale
        m_ref = torch.maximum(m, s.amax(-1))
        alpha = torch.exp(m - m_ref)
        p = torch.exp(s - m_ref.unsqueeze(-1))
        ref = (m_ref, l * alpha + p.sum(-1), acc * alpha.unsqueeze(-1) + p @ vb)
        where = "the first key block" if i == 0 else f"key block {i + 1} (after earlier blocks)"
        for name, f, e in zip(("m", "l", "acc"), got, ref):
            feedback.tensor(f, e, f"{name} on {where}", rtol=_TOL, atol=_TOL)
