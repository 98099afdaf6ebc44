"""The Gluon forward (gluon_flash.py) compiled for an sm_90 GPU on any machine, GPU or not: the
compiler's account of it (shared memory, threads, and the Hopper instructions in its PTX), which
notebook 08 shows on a learner's CPU and the tests check without a GPU.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import torch

from . import gluon_flash as gf


# PTX instructions that show the kernel's Hopper structure, counted by `compile_for_hopper`
HOPPER_PTX = {"wgmma.mma_async": "tensor-core products",
              "cp.async.bulk.tensor": "TMA copies",
              "mbarrier.try_wait": "barrier waits",
              "setmaxnreg": "register hand-overs between roles"}


def compile_for_hopper(head_dim: int = 128, causal: bool = True, pingpong: bool = True, q_buffers: int = 2,
                       timeout: float = 300.0) -> dict:
    """Compile the kernel for an sm_90 GPU on this machine, GPU or not (Triton's own ptxas builds
    the binary), and return the compiler's account: shared memory, threads, and how often each of
    HOPPER_PTX's instructions appears in the PTX.

    It runs in a fresh Python: Gluon cannot compile under the CPU interpreter, which this package
    switches on when there is no CUDA (use_triton_interpreter_without_cuda).
    """
    if head_dim not in gf.SUPPORTED_HEAD_DIMS:
        raise ValueError(f"head_dim must be one of {gf.SUPPORTED_HEAD_DIMS}; got {head_dim}")
    if q_buffers not in (1, 2):
        raise ValueError(f"q_buffers must be 1 or 2; got {q_buffers}")
    call = (f"import json; from course_kit.attention.gluon_hopper import _compile_here; "
            f"print(json.dumps(_compile_here({head_dim}, {causal}, {pingpong}, {q_buffers})))")
    env = {**os.environ, "TRITON_INTERPRET": "0",     # kept by use_triton_interpreter_without_cuda
           "CUDA_VISIBLE_DEVICES": ""}              # compile only: never touch a GPU that may be there
    done = subprocess.run([sys.executable, "-c", call], env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode:
        raise RuntimeError(f"compiling the Gluon kernel for sm_90 failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _compile_here(head_dim: int, causal: bool, pingpong: bool, q_buffers: int) -> dict:
    """compile_for_hopper's work, in the fresh Python it starts."""
    if not gf.HAS_GLUON:
        raise RuntimeError("this Triton has no Gluon (Triton >= 3.5)")
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type

    # a CPU tensor stands in for the GPU's: only its dtype and shape matter to the compiler
    flat = torch.empty(4096, head_dim, dtype=torch.bfloat16)
    args = dict(ORDER=torch.empty(8, dtype=torch.int32), q_desc=gf._descriptor(flat, gf.BLOCK_M // 2),
                k_desc=gf._descriptor(flat, gf.BLOCK_N), v_desc=gf._descriptor(flat, gf.BLOCK_N),
                o_desc=gf._descriptor(flat, gf.BLOCK_M // 2),
                LSE=torch.empty(8), seq_q=4096, seq_k=4096, n_q_heads=16, group=1, n_bh=64, qk_scale=0.1)
    constants = dict(HEAD_DIM=head_dim, BLOCK_M=gf.BLOCK_M, BLOCK_N=gf.BLOCK_N, STAGES=gf.STAGES, CAUSAL=causal,
                     Q_BUFFERS=q_buffers, PINGPONG=pingpong)
    fn = gf._gluon_flash_fwd
    signature, constexprs = {}, {}
    for i, name in enumerate(fn.arg_names):
        if name in constants:
            signature[name] = "constexpr"
            constexprs[(i, )] = constants[name]
        else:
            signature[name] = mangle_type(args[name])
    kernel = triton.compile(GluonASTSource(fn, signature, constexprs), target=GPUTarget("cuda", 90, 32),
                            options={"num_warps": 4})
    ptx = kernel.asm["ptx"]
    return {"shared_bytes": kernel.metadata.shared, "threads": 32 * kernel.metadata.num_warps,
            "ptx_lines": ptx.count("\n"), "cubin_bytes": len(kernel.asm["cubin"]),
            "ptx_counts": {ins: ptx.count(ins) for ins in HOPPER_PTX}, "triton": triton.__version__}
