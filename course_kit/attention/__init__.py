"""Attention, from the textbook formula to a Triton flash-attention kernel (notebook 08).

naive            softmax(QK^T)V with the S x S matrix in memory; peak_memory()
online_softmax   the running-max / rescaled-sum recurrence, for one row and blockwise
tiled            the flash-attention forward in pure PyTorch (loops over blocks)
triton_flash     the same algorithm as a Triton kernel (forward; causal, GQA, fp16/bf16)
sdpa_backends    PyTorch's scaled_dot_product_attention backends and which GPUs have which

Without CUDA, Triton kernels run through Triton's CPU interpreter. The switch is an environment
variable read when a kernel is defined, so it is set here, before anything imports triton_flash.
"""
from __future__ import annotations

import os
import sys

import torch

if not torch.cuda.is_available() and "triton_flash" not in str(list(sys.modules)):
    os.environ.setdefault("TRITON_INTERPRET", "1")

from .naive import attention_flops, naive_attention, peak_memory, reference_attention  # noqa: E402
from .online_softmax import blockwise_softmax, online_softmax_row, online_softmax_update  # noqa: E402
from .tiled import tiled_attention, tiled_block_step  # noqa: E402

__all__ = ["attention_flops", "naive_attention", "peak_memory", "reference_attention",
           "blockwise_softmax", "online_softmax_row", "online_softmax_update",
           "tiled_attention", "tiled_block_step", "flash_attention", "triton_available"]


def triton_available() -> tuple[bool, str]:
    """Whether the Triton kernel can run here (GPU, or CPU through the interpreter), and why not."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False, "triton is not installed (pip install triton; Linux x86-64 only)"
    from . import triton_flash
    if not torch.cuda.is_available() and not triton_flash.interpreting():
        return False, "no CUDA and triton was imported before TRITON_INTERPRET=1 was set"
    return True, "ok"


def __getattr__(name: str):
    # imported lazily so that the rest of the package works where triton is not installed
    if name == "flash_attention":
        from .triton_flash import flash_attention
        return flash_attention
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
