"""Checks for notebook 09 (parallelism): the forward pass of a row-parallel linear, on two gloo
processes against the unsharded linear."""
from __future__ import annotations

from typing import Any

import torch

from .. import exercise, expect

# (tokens shape, in features, out features, with bias)
_CASES = [((5,), 8, 6, False), ((2, 3), 16, 4, True), ((7,), 32, 32, True)]


def _row_parallel_case(rank: int, world_size: int, fn: Any) -> list[dict]:
    """Run the learner's function on this rank's shards; compare with F.linear on full tensors."""
    from ...parallel.launcher import resolve
    fn = resolve(fn)
    out = []
    for i, (lead, d_in, d_out, bias) in enumerate(_CASES):
        g = torch.Generator().manual_seed(90 + i)
        x = torch.randn(*lead, d_in, generator=g)
        w = torch.randn(d_out, d_in, generator=g)
        b = torch.randn(d_out, generator=g) if bias else None
        want = torch.nn.functional.linear(x, w, b)
        cols = slice(rank * d_in // world_size, (rank + 1) * d_in // world_size)
        got = fn(x[..., cols].clone(), w[:, cols].clone(), None if b is None else b.clone())
        row: dict[str, Any] = {"case": i, "shape": tuple(want.shape), "bias": bias}
        if not isinstance(got, torch.Tensor):
            row["error"] = f"returned {type(got).__name__}, not a tensor"
        elif tuple(got.shape) != tuple(want.shape):
            row["error"] = f"shape {tuple(got.shape)}, expected {tuple(want.shape)}"
        else:
            row["max_err"] = float((got - want).abs().max())
            if b is not None:  # the usual slip: bias added on every rank before the sum
                row["bias_added_n_times"] = bool(torch.allclose(got, want + (world_size - 1) * b,
                                                                atol=1e-4))
        out.append(row)
    return out


@exercise("09.row_parallel")
def row_parallel(fn) -> None:
    from ...parallel import launcher
    expect(callable(fn), "row_parallel_forward", "a function", type(fn).__name__)
    results = launcher.launch(_row_parallel_case, 2, launcher.portable(fn), backend="gloo")
    for rank, rows in enumerate(results):
        for r in rows:
            what = f"rank {rank}, case {r['case']} (output {r['shape']}, bias={r['bias']})"
            expect("error" not in r, what, "the full output tensor", r.get("error"))
            if r.get("bias_added_n_times"):
                expect(False, what, "the bias added once, after the all-reduce",
                       "the bias added on both ranks before the sum (counted twice)")
            expect(r["max_err"] < 1e-4, what, "y = x W^T + b (max error < 1e-4)",
                   f"max error {r['max_err']:.3g}; did every rank all-reduce its partial product?")
