"""`bench attention`'s forward steps (notebook 08 walks them): the Triton forward, then the same
forward in Gluon, one change at a time, each checked against SDPA and timed on the same inputs at
the acceptance shape. A helper of benchmarks/attention.py; it registers no topic of its own.
"""
from __future__ import annotations

from typing import Callable

import torch

from .. import bench
from ..attention import naive, sdpa_backends
from ..device import multiprocessors

# largest |error| against float64 (or SDPA) a variant may show: outputs are O(1), each rounding in
# bf16 keeps 8 significant bits, in fp16 11
TOLERANCE = {torch.bfloat16: 3e-2, torch.float16: 5e-3, torch.float32: 1e-4}


def _inputs(b: int, hq: int, hkv: int, s: int, d: int, dtype: torch.dtype, dev: torch.device, seed: int):
    g = torch.Generator(device=dev).manual_seed(seed)
    return tuple(torch.randn(b, h, s, d, generator=g, device=dev, dtype=dtype) for h in (hq, hkv, hkv))


# The forward's steps, each one change from the step before, measured in one run at the
# acceptance shape (notebook 08 walks them): (name, loader, BLOCK_M, BLOCK_N, num_warps, num_stages).
STEPS = [
    ("pointer loads, 128 x 64 tiles, 8 warps", "pointer", 128, 64, 8, 3),
    ("TMA loads, descriptors built by every program", "device", 128, 64, 8, 3),
    ("TMA loads, descriptors built once on the host", "host", 128, 64, 8, 3),
    ("64-row programs over 4 warps, two sharing an SM", "host", 64, 64, 4, 3),
    ("the same with two K/V tiles in flight instead of three", "host", 64, 64, 4, 2),
]


# Then the same forward in Gluon (attention/gluon_flash.py), one change at a time: (name, options of
# gluon_flash_attention); programs "sm" is one program an SM, None one program a work item.
GLUON_STEPS = [
    ("Gluon: a loading warp and two computing warpgroups sharing 128 x 128 K/V tiles, a program an item",
     {"pingpong": False, "q_buffers": 1, "programs": None, "snake": False}),
    ("the same as one persistent program an SM walking the items",
     {"pingpong": False, "q_buffers": 1, "programs": "sm", "snake": False}),
    ("the two computing warpgroups take turns at the tensor cores (ping-pong)",
     {"pingpong": True, "q_buffers": 1, "programs": "sm", "snake": False}),
    ("the next item's Q loaded while this one computes (two Q buffers)",
     {"pingpong": True, "q_buffers": 2, "programs": "sm", "snake": False}),
    ("the persistent programs take their items in snake order, heavy with light",
     {"pingpong": True, "q_buffers": 2, "programs": "sm", "snake": True}),
]


def _step_fns(dev: torch.device, causal: bool) -> list[tuple[dict, Callable]]:
    """(row, fn(q, k, v)) for every step of STEPS, then of GLUON_STEPS where that kernel runs."""
    from ..attention import gluon_flash, triton_flash as tf
    steps = []
    for name, loader, bm, bn, warps, stages in STEPS:
        desc = {"pointer": tf.POINTER, "device": tf.DEVICE_DESC, "host": tf.HOST_DESC}[loader]
        config = {"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": warps, "num_stages": stages}
        steps.append(({"step": name, "loader": loader, **config},
                      lambda q, k, v, desc=desc, config=config:
                      tf.launch_forward(q, k, v, causal=causal, scale=None, desc=desc, config=config)[0]))
    if gluon_flash.runs_here(dev, torch.bfloat16):
        sms = multiprocessors(dev)
        for name, options in GLUON_STEPS:
            options = {**options, "programs": {"sm": sms, None: 1 << 30}[options["programs"]]}
            steps.append(({"step": name, "kernel": "gluon", **options},
                          lambda q, k, v, options=options:
                          gluon_flash.gluon_flash_attention(q, k, v, causal=causal, **options)[0]))
    return steps


def forward_steps(dev: torch.device, dtype: torch.dtype, shape: dict, repeat: int) -> list[dict]:
    """STEPS (and GLUON_STEPS) timed on the same inputs, each checked against SDPA first (Hopper
    with TMA only)."""
    b, h, s, d, causal = shape["batch"], shape["heads"], shape["seq_len"], shape["head_dim"], shape["causal"]
    sets = [_inputs(b, h, h, s, d, dtype, dev, seed=40 + i) for i in range(2)]
    ref = sdpa_backends.sdpa(*sets[0], causal=causal)
    flops = naive.attention_flops(b, h, s, s, d, causal=causal)
    tolerance = TOLERANCE[dtype]
    rows = []
    for row, fn in _step_fns(dev, causal):
        try:
            row["max_abs_err"] = (fn(*sets[0]) - ref).abs().max().item()
            if not row["max_abs_err"] <= tolerance:     # a wrong step is not timed
                raise ValueError(f"max |error| against SDPA {row['max_abs_err']:.3g} > {tolerance}")
            t = bench.timeit(fn, warmup=3, repeat=repeat, inputs=sets, device=dev)
            row.update(median_s=t.median_s, tflops=flops / t.median_s / 1e12)
        except Exception as exc:  # noqa: BLE001 - a step that cannot run here is recorded as such
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
        rows.append(row)
    return rows
