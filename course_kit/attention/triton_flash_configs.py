"""The flash forward's launch configurations (triton_flash.py), as measured on the reference H200, and
the autotuner's keys: what the kernel is tried with, and why these.
"""
from __future__ import annotations

from .. import device as _device
from ..device import use_triton_interpreter_without_cuda

use_triton_interpreter_without_cuda()   # before Triton is first imported (the kernels' module imports this)

import triton  # noqa: E402

try:   # host-side descriptors: built once per launch on the CPU, not once per program on the GPU
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:   # pragma: no cover - Tritons before 3.4
    TensorDescriptor = None

# Measured on the reference H200 (data/reference/h200/logs/attn-tune-*-s6.json and the "steps" of
# h200/attention.json, B4 H16 S4096 D128 causal): a 4-warp program of 64 query rows with 64-key
# tiles, three tiles in flight (two such programs share an SM), beat 8 warps over 128 rows (two
# Hopper warpgroups); fewer stages starve the tensor cores. At 16k keys and more, 128 x 128 tiles
# over 8 warps won instead. The 64 x 32 config is for GPUs with little shared memory (a T4 has
# 64 KiB per SM); configs that do not fit are dropped by the autotuner.
_CONFIGS = [
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 64}, num_warps=4, num_stages=3),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 128}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 64}, num_warps=4, num_stages=3),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 32}, num_warps=4, num_stages=2),
]
_INTERPRETER_BLOCKS = (32, 32)   # one fixed config: autotuning the interpreter would be very slow
# Host descriptors cost host time on every launch (the CPU encodes three TMA descriptors), device
# descriptors cost GPU time in every program (each builds its own). Measured: below 4096 keys the
# launch is short enough that the host's cost shows, so device descriptors were faster there.
HOST_DESCRIPTORS_FROM = 4096
# Measured and not kept: rescaling the running output only when a row's max grew by more than 2^8
# (FlashAttention-4's trick; here a branch for the whole program at every key block), 443 TFLOP/s
# against 507 at the acceptance shape on the H200 (logs/attn-lazy-rescale-s10.json; commit 3d00d4f).
# Also not kept: persistent scheduling (a fixed set of programs walking the tiles, heaviest first),
# slower at every shape but one, where it tied: at the acceptance shape 449 TFLOP/s with two
# programs an SM against 497 launched a program per tile (logs/attn-persistent-s10.json; 3cd5360).


def _prune_configs(configs, named_args, **kwargs):
    """Every config compiles and is timed once per key, so try only the plausible ones: on Hopper
    and newer, the two measured best for the length (128 x 128 tiles only from 16k keys); older or
    smaller GPUs keep every config."""
    if (_device.current_capability() or (0, 0)) >= (9, 0):     # the emulated GPU's under COURSE_KIT_EMULATE
        long = named_args.get("seq_bucket", 0) >= 16384
        return [configs[0], configs[2] if long else configs[1]]
    return configs


def seq_bucket(seq_len: int) -> int:
    """Autotune key for the length: the next power of two (capped), so 1000 and 1024 share a tuning."""
    return min(triton.next_power_of_2(max(1, seq_len)), 16384)


def bh_bucket(batch_heads: int) -> int:
    """Autotune key for batch x heads, which sets how many programs there are to fill the SMs."""
    return min(triton.next_power_of_2(max(1, batch_heads)), 256)


def _set_host_blocks(nargs: dict) -> None:
    """Autotune pre-hook: a host descriptor's tile shape must match the config being tried."""
    if TensorDescriptor is not None and isinstance(nargs.get("Q_DESC"), TensorDescriptor):
        d = nargs["HEAD_DIM"]
        nargs["Q_DESC"].block_shape = [1, 1, nargs["BLOCK_M"], d]
        nargs["K_DESC"].block_shape = [1, 1, nargs["BLOCK_N"], d]
        nargs["V_DESC"].block_shape = [1, 1, nargs["BLOCK_N"], d]
