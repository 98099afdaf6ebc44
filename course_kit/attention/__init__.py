"""Attention: every way the course computes it, from the textbook formula to Triton kernels.

Notebook 08 builds it up; the course model (models/llama.py) and the engine (engine/, notebook 06)
import it from here and are handed kernels only through `model.set_attention(decode=..., paged=...)`.

The idea, in PyTorch (notebook 08):
    naive            softmax(QK^T)V with the S x S matrix in memory; peak_memory()
    online_softmax   the running-max / rescaled-sum recurrence: one row, blockwise, and
                     `online_softmax_update`, the one PyTorch fold (tiled, ring attention)
    tiled            the flash-attention forward in pure PyTorch (loops over blocks)
    row_steps        one query row folded block by block: m, l and the output after each block
    tiles            which (query block, key block) tiles a flash kernel computes and which it skips
    io_complexity    HBM accesses of standard and flash attention (Dao et al. 2022, Theorem 2)
    sdpa_backends    PyTorch's scaled_dot_product_attention backends and which GPUs have which
    availability     probes for Triton and xFormers that say why they cannot run here
    explain          notebook 08's "what just happened", worded from the measured numbers
What the course model runs (PyTorch):
    gqa              grouped-query attention: causal SDPA, one-query decode over a contiguous cache
    paged            PagedBatch, and attention over a paged KV cache (reference and gathered)
    engine_step      the engine's step: decodes and prefill chunks (EngineBatch, engine_attention)
    registry         kernels by name for set_attention; register_attention
Triton kernels (imported on demand; without CUDA they run through Triton's CPU interpreter):
    triton_softmax   the one Triton online-softmax fold (`online_softmax_fold`) and `mma`
    triton_flash     the flash-attention forward (causal, GQA, fp16/bf16, TMA, autotuned)
    triton_flash_configs  its launch configurations, as measured on the H200, and the autotuner's keys
    triton_flash_bwd its backward pass and an autograd wrapper
    gluon_flash      the forward again in Gluon, warp-specialised for Hopper (FlashAttention-3's shape)
    gluon_schedule   which item each persistent Gluon program takes (snake order), and its work
    gluon_hopper     compile_for_hopper: the Gluon kernel built for sm_90 on any machine, its PTX counted
    paged_triton     paged decode (flash-decoding) and varlen kernels over a block table
Ring attention over several GPUs is parallel/context.py; it folds with `online_softmax_update`.
"""
from __future__ import annotations

from ..device import has_cuda, triton_installed, use_triton_interpreter_without_cuda  # noqa: F401 (re-exported)
from .naive import attention_flops, naive_attention, peak_memory, reference_attention
from .online_softmax import blockwise_softmax, online_softmax_row, online_softmax_update
from .tiled import tiled_attention, tiled_block_step

__all__ = ["attention_flops", "naive_attention", "peak_memory", "reference_attention",
           "blockwise_softmax", "online_softmax_row", "online_softmax_update",
           "tiled_attention", "tiled_block_step", "flash_attention", "triton_available",
           "triton_installed", "use_triton_interpreter_without_cuda"]


def triton_available() -> tuple[bool, str]:
    """Whether the Triton kernel can run here (GPU, or CPU through the interpreter), and why not."""
    if not triton_installed():
        return False, "triton is not installed (pip install triton; Linux x86-64 only)"
    from . import triton_flash
    if not has_cuda() and not triton_flash.interpreting():
        return False, "no CUDA and TRITON_INTERPRET is set to off, so Triton cannot run its CPU interpreter"
    return True, "ok"


def __getattr__(name: str):
    # imported lazily so that the rest of the package works where triton is not installed, and
    # so that the interpreter is switched on only when a kernel is asked for
    if name == "flash_attention":
        from .triton_flash import flash_attention
        return flash_attention
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
