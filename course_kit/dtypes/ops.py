"""Operations in low precision: where fp16 overflows and bf16 does not, and where bf16 loses
precision that fp16 keeps.

Each operation is computed with torch in the format itself (every intermediate result rounded to
the format, as the hardware does) and compared with a float64 reference:

- "square":  x * x                 (fp16 overflows beyond about 256)
- "exp":     exp(x)                (fp16 overflows beyond about 11.1, bf16 and fp32 beyond 88.7)
- "sum":     x + x + ... (n terms), accumulated one addition at a time in the format
             (bf16 stops growing once x is below half a unit in the last place of the sum)
- "softmax": naive softmax exp(l) / sum exp(l) of n logits spread evenly over [0, x]
             (exp overflows first in fp16; torch.softmax subtracts the max and does not)
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .formats import get_format

__all__ = ["OPS", "OP_FORMATS", "OpResult", "evaluate", "curve", "default_grid"]

OPS: dict[str, str] = {
    "square": "x²",
    "exp": "exp(x)",
    "sum": "sum of n copies of x",
    "softmax": "naive softmax of n logits spread over [0, x] (largest probability)",
}
OP_FORMATS: tuple[str, ...] = ("fp32", "bf16", "fp16")
MAX_TERMS = 100_000


def _check(op: str, fmt: str, n: int) -> torch.dtype:
    if op not in OPS:
        raise ValueError(f"unknown operation {op!r}; choose one of {list(OPS)}")
    if fmt not in OP_FORMATS:
        raise ValueError(f"operation explorer format {fmt!r} not supported; choose one of "
                         f"{list(OP_FORMATS)} (fp8 and integers have no arithmetic in torch)")
    if not isinstance(n, int) or not 1 <= n <= MAX_TERMS:
        raise ValueError(f"n must be an integer in [1, {MAX_TERMS}], got {n!r}")
    return get_format(fmt).torch_dtype


@dataclass(frozen=True)
class OpResult:
    op: str
    x: float
    format: str
    value: float
    reference: float
    rel_error: float
    outcome: str          # "ok", "lost precision", "overflow to inf", "underflow to zero", "NaN"


def _outcome(value: float, ref: float, rel: float, fmt: str) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value) and not math.isinf(ref):
        return "overflow to inf"
    if value == 0 and ref != 0:
        return "underflow to zero"
    # One rounding costs at most eps/2; a few are fine, more than 4 eps is precision lost.
    return "ok" if rel <= 4 * get_format(fmt).eps else "lost precision"


def _rel(value: float, ref: float) -> float:
    if math.isnan(value) or math.isnan(ref):
        return math.nan
    if value == ref:
        return 0.0
    if math.isinf(value) or math.isinf(ref) or ref == 0:
        return math.inf
    return abs(value - ref) / abs(ref)


def _running_sum(x: float, n: int, dtype: torch.dtype) -> list[float]:
    """Partial sums s_1..s_n, each addition rounded to dtype."""
    term = torch.tensor(x, dtype=dtype)
    s = term.clone()
    out = [float(s)]
    for _ in range(n - 1):
        nxt = s + term
        if bool(nxt == s) or not bool(torch.isfinite(nxt)):
            # stalled (or inf/NaN): every later partial sum is the same value
            out.extend([float(nxt)] * (n - len(out)))
            break
        s = nxt
        out.append(float(s))
    return out


def _softmax_top(x: float, n: int, dtype: torch.dtype) -> float:
    logits = torch.linspace(0.0, x, n, dtype=torch.float64).to(dtype)
    e = torch.exp(logits)
    return float((e / e.sum())[-1])


def _reference(op: str, x: float, n: int) -> float:
    if op == "square":
        return x * x if abs(x) < 1e154 else math.inf
    if op == "exp":
        return math.exp(x) if x < 709 else math.inf
    if op == "sum":
        return n * x
    logits = torch.linspace(0.0, x, n, dtype=torch.float64)
    return float(torch.softmax(logits, dim=0)[-1])


def evaluate(op: str, x: float, fmt: str, *, n: int = 1000) -> OpResult:
    """Compute one operation in one format and compare with the float64 reference."""
    dtype = _check(op, fmt, n)
    x = float(x)
    if not math.isfinite(x):
        raise ValueError(f"x must be finite, got {x!r}")
    if op == "square":
        t = torch.tensor(x, dtype=dtype)
        value = float(t * t)
    elif op == "exp":
        value = float(torch.exp(torch.tensor(x, dtype=dtype)))
    elif op == "sum":
        value = _running_sum(x, n, dtype)[-1]
    else:
        value = _softmax_top(x, n, dtype)
    ref = _reference(op, x, n)
    rel = _rel(value, ref)
    return OpResult(op, x, fmt, value, ref, rel, _outcome(value, ref, rel, fmt))


def default_grid(op: str, n: int = 1000) -> list[float]:
    """A sweep of the operation's parameter that crosses the interesting thresholds."""
    if op == "square":
        return [10 ** (k / 20) for k in range(-40, 81)]          # 0.01 .. 1e4
    if op == "exp":
        return [k / 2 for k in range(-240, 241)]                  # -120 .. 120
    if op == "sum":
        return [float(k) for k in range(1, n + 1)]                # number of terms
    return [k / 2 for k in range(0, 201)]                         # spread 0 .. 100


def curve(op: str, fmt: str, *, x: float = 1.0, n: int = 1000) -> tuple[list[float], list[float]]:
    """(parameters, relative errors) along the default grid.

    For "sum" the grid is the number of terms k = 1..n of the running sum of x (one pass);
    for the other operations it is x itself.
    """
    dtype = _check(op, fmt, n)
    if op == "sum":
        sums = _running_sum(float(x), n, dtype)
        ks = default_grid(op, n)
        return ks, [_rel(s, k * float(x)) for s, k in zip(sums, ks)]
    grid = default_grid(op, n)
    if op == "softmax":
        vals = [_softmax_top(g, n, dtype) for g in grid]
    else:
        t = torch.tensor(grid, dtype=torch.float64).to(dtype)
        vals = (t * t if op == "square" else torch.exp(t)).to(torch.float64).tolist()
    return grid, [_rel(v, _reference(op, g, n)) for v, g in zip(vals, grid)]
