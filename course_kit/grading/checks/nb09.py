"""Checks for notebook 09 (parallelism): the forward pass of a row-parallel linear, on two gloo
processes (where the learner's code lives), compared with the unsharded linear by the checker."""
from __future__ import annotations

from typing import Any

import torch

from course_kit import grading
from course_kit.grading.checks.codec import Raised, raised

WORLD = 2
# (tokens shape, in features, out features, with bias)
_SHAPES = [((5,), 8, 6, False), ((2, 3), 16, 4, True), ((7,), 32, 32, True)]


def _cases() -> list[tuple]:
    cases = []
    for i, (lead, d_in, d_out, bias) in enumerate(_SHAPES):
        g = torch.Generator().manual_seed(90 + i)
        x = torch.randn(*lead, d_in, generator=g)
        w = torch.randn(d_out, d_in, generator=g)
        b = torch.randn(d_out, generator=g) if bias else None
        cases.append((x, w, b))
    return cases


def _rank(rank: int, world_size: int, fn: Any, cases: list) -> list:
    """One rank: call the learner's function on this rank's shards of every case."""
    from course_kit.parallel.launcher import resolve
    fn = resolve(fn)
    out = []
    for x, w, b in cases:
        cols = slice(rank * x.shape[-1] // world_size, (rank + 1) * x.shape[-1] // world_size)
        try:
            out.append(fn(x[..., cols].clone(), w[:, cols].clone(), None if b is None else b.clone()))
        except Exception as exc:
            out.append(raised(exc))
    return out


def probe(fn: Any, cases: list) -> list:
    """Runs where the learner's code lives: results[rank][case]."""
    from course_kit.parallel import launcher
    try:
        return launcher.launch(_rank, WORLD, launcher.portable(fn), cases, backend="gloo")
    except Exception as exc:
        first = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        return [[Raised(type(exc).__name__, first[:200])] * len(cases)] * WORLD


HINT = """Each rank holds a slice of the input features: x_shard @ weight_shard.T is only its partial
product. Sum the partial products over the ranks with dist.all_reduce (in place), then add the bias
once, after the sum (adding it on every rank counts it twice)."""


@grading.exercise("09.row_parallel", cases=_cases, probe="course_kit.grading.checks.nb09:probe", hint=HINT)
def row_parallel(answer) -> None:
    results = answer.data
    if not (isinstance(results, list) and len(results) == WORLD and
            all(isinstance(r, list) and len(r) == len(answer.cases) for r in results)):
        raise grading.Wrong("the answer could not be probed on two ranks: pass your function")
    for rank, outputs in enumerate(results):
        for (x, w, b), got in zip(answer.cases, outputs):
            want = torch.nn.functional.linear(x, w, b)
            what = f"rank {rank}, output of shape {tuple(want.shape)} ({'with' if b is not None else 'no'} bias)"
            if isinstance(got, Raised):
                raise grading.Wrong(f"{what}: your function raised {got!r}")
            if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(want.shape):
                grading.expect(False, f"{what}: expected the full output tensor", tuple(want.shape),
                               got if not isinstance(got, torch.Tensor) else tuple(got.shape))
            if b is not None and torch.allclose(got, want + (WORLD - 1) * b, atol=1e-4):
                raise grading.Wrong(f"{what}: the bias is added on both ranks before the sum (counted twice)")
            err = float((got.double() - want.double()).abs().max())
            grading.expect(err < 1e-4, f"{what}: max error {err:.3g}; did every rank all-reduce its "
                                       "partial product?", "y = x W^T + b", err)
