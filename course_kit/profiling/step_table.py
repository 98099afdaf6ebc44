"""One decode step of a trace as a table of kernels, for notebook 05's exercise 05.read_trace.

`step_rows(trace, step)` turns a kept trace (the H200's `05-exercise`, an eager decode step at batch
4: not the batch-1 step the lesson shows above the exercise) into rows {"name", "kind",
"start_us", "end_us"} (times from the step's first kernel; kind "matmul" for GEMM/GEMV kernels,
"other" for the rest); `synthetic_step(seed)` builds a step of the same shape on any machine (a
batch-1 decode step of a 6-layer model: per layer, norms, matmuls, RoPE, attention and adds, with
launch gaps), which the exercise uses until an H200 trace is recorded. `step_id` names a table by
its content, so that an answer says which table it was computed from.
"""
from __future__ import annotations

import hashlib
import json
import random
import re
from typing import Mapping

from . import trace as tr

MATMUL = re.compile(r"gemm|gemv|nvjet|cutlass|cublas|xmma|matmul|aten::mm|aten::addmm|aten::linear", re.I)
EXERCISE_TRACE = "05-exercise"       # the kept H200 trace the exercise reads when it exists


def kind(name: str) -> str:
    return "matmul" if MATMUL.search(name) else "other"


def step_rows(trace: Mapping, step: int | None = None) -> list[dict]:
    """The kernels of one step (the middle profiled step by default) of a trace, from its first start."""
    _, acts = tr.activities(trace)
    steps = sorted({a.step for a in acts if a.step is not None})
    if not steps:
        raise ValueError("the trace has no kernels attributed to a step")
    k = steps[len(steps) // 2] if step is None else step
    acts = [a for a in acts if a.step == k and a.kind in ("kernel", "cpu_op")]
    if not acts:
        raise ValueError(f"step {k} has no kernels; steps with kernels: {steps}")
    t0 = acts[0].start_us
    return [{"name": a.name, "kind": kind(a.name), "start_us": round(a.start_us - t0, 3),
             "end_us": round(a.end_us - t0, 3)} for a in acts]


_TNT, _TNN = "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT", "nvjet_sm90_tst_16x64_64x16_4x1_v_bz_TNN"
# one layer of a batch-1 decode step: (kernel, µs). The q/k/v, output and w2 products share one GEMM
# kernel (same tile shape), as in a real trace; w13's wider product picks another.
_LAYER = [("rmsnorm_kernel<float>", 3.0), (_TNT, 7.0), ("rotary_embedding_kernel", 2.0),
          ("decode_attention_kernel", 5.0), (_TNT, 5.0), ("vectorized_elementwise_kernel<add>", 1.5),
          ("rmsnorm_kernel<float>", 3.0), (_TNN, 12.0), ("silu_and_mul_kernel", 2.5), (_TNT, 8.0),
          ("vectorized_elementwise_kernel<add>", 1.5)]


def synthetic_step(seed: int = 0, layers: int = 6) -> list[dict]:
    """A batch-1 decode step's kernels, seeded: kernel times jitter by ±20%, launch gaps 2 to 10 µs."""
    rng = random.Random(seed)
    rows, t = [], 0.0
    for _ in range(layers):
        for name, us in _LAYER:
            d = round(us * rng.uniform(0.8, 1.2), 3)
            rows.append({"name": name, "kind": kind(name), "start_us": round(t, 3), "end_us": round(t + d, 3)})
            t += d + rng.uniform(2.0, 10.0)
    head = round(20.0 * rng.uniform(0.9, 1.1), 3)
    rows.append({"name": "nvjet_sm90_tst_128x8_64x16_4x1_v_bz_TNT", "kind": "matmul",
                 "start_us": round(t, 3), "end_us": round(t + head, 3)})
    return rows


def step_id(rows: list[dict]) -> str:
    """A short name for a table, from its content."""
    return hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()[:12]


def exercise_step(slug: str = "h200") -> tuple[list[dict], str]:
    """The table 05.read_trace reads, and where it comes from: the kept H200 trace of an eager decode
    step at batch 4 when it exists, else `synthetic_step(0)`."""
    from . import files
    kept = files.load(EXERCISE_TRACE, slug)
    if kept is not None:
        try:
            return step_rows(kept), f"the {slug.upper()} trace `{EXERCISE_TRACE}`"
        except ValueError:
            pass
    return synthetic_step(0), "a synthetic decode step (no H200 trace recorded yet)"


def candidates() -> dict[str, list[dict]]:
    """Every table an answer may have been computed from, by id (what a checker looks up)."""
    out = {}
    for rows in (exercise_step()[0], synthetic_step(0)):
        out[step_id(rows)] = rows
    return out
