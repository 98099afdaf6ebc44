"""Triton kernels for the batch-1 decode step (notebook 05, "Fewer, wider kernels: the step written in Triton").

At batch 1 every weight is read once per token and used for one multiply-add: the step is a
chain of matrix-vector products, and its speed is how close each one reads at the copy rate.
Around them, the layer's small operations (norms, RoPE, the K/V append, SwiGLU, residuals) cost
a kernel each in the eager step. Here they ride inside the products that need them:

- `gemv`        y = W x, with RMSNorm folded into the load of x, SwiGLU folded into the load of
                x, and the residual add folded into the store of y; optionally launched with
                programmatic dependent launch, so a kernel reads its first weights while the
                previous one finishes;
- `qkv_rope`    the q/k/v product with RoPE and the K/V append in its store;
- `argmax`      the greedy token: the logits product's store keeps each program's largest logit,
                and one small kernel picks the winner (PyTorch reduces 128k logits in one block);
- `step`        `TritonDecodeStep`: the course model's decode step from these, five kernels a
                layer (six when attention cuts the context into slices);
- `accept`      speculative decoding's greedy acceptance (notebook 10): the verify pass's argmax,
                the kept prefix and the sequence's bookkeeping in one program;
- `woq_gemv`    the same products on weight-only int8 and int4 weights (issue 48, notebook 01 §7):
                codes dequantised in registers, never a bf16 copy of the weights;
- `woq_pack`    how those weights sit in memory: woq.py's codes in int32 words, and back;
- `woq_hopper`  those products compiled for sm_90 on any machine: registers and SASS, for the tests;
- `exchange`    under tensor parallelism (notebook 09), the ranks' partial sums pushed by each
                row-parallel product into every GPU's symmetric memory and summed by the next
                product as it loads x: no all-reduce kernel.

Importing a kernel module without CUDA sets TRITON_INTERPRET=1 (tests run on CPU tensors).
"""
from __future__ import annotations

import contextlib
from types import ModuleType
from typing import Iterator


@contextlib.contextmanager
def constants(knobs: dict, *modules: ModuleType) -> Iterator[None]:
    """Set module constants (block shapes and the like: gemv.TILE, gemv.PROGRAMS_PER_SM, ...) for a tuning
    run, and put them back afterwards, whatever happens. Each knob is set in every given module
    that has it; a knob that none of them has is an error, not a silent no-op.

    The tuning scripts (scripts/decode_step_probe.py, tp_decode_probe.py, tp_shard_compute.py)
    build the Triton step inside it: the kernels read the constants when the step is built.
    """
    saved = [(m, k, getattr(m, k)) for k in knobs for m in modules if hasattr(m, k)]
    missing = sorted(set(knobs) - {k for _, k, _ in saved})
    if missing:
        raise AttributeError(f"no module among {[m.__name__ for m in modules]} has {missing}")
    try:
        for m, k, _ in saved:
            setattr(m, k, knobs[k])
        yield
    finally:
        for m, k, v in saved:
            setattr(m, k, v)
