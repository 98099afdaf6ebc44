"""The weight-only products (woq_gemv.py) compiled for an sm_90 GPU on any machine, GPU or not: the
compiler's account of them (registers, stack, and the SASS instructions of the loop), which the
tests check without a GPU. Triton's interpreter runs the kernels' arithmetic on a CPU; it does not
compile them, so it cannot see what only the GPU build does (a constant that cannot be re-bound in
an unrolled loop, a mask and an or that stay two instructions, registers that cut occupancy).
"""
from __future__ import annotations

import collections
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path


def compile_for_hopper(fmt: str, n: int = 2048, k: int = 8192, group_size: int = 128, prologue: str = "plain",
                       residual: bool = True, timeout: float = 300.0) -> dict:
    """Compile `_woq_gemv_kernel` for an N x K weight in `fmt`, as woq_gemv launches it on a 132-SM
    GPU with PDL, for sm_90 (Triton's own ptxas builds the binary); returns the blocks, registers
    and stack per thread, and how often each SASS instruction appears. Runs in a fresh Python with
    the interpreter off and no GPU visible."""
    from .woq_pack import FORMATS
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {FORMATS}, got {fmt!r}")
    call = (f"import json; from course_kit.cuda_graphs.decode_kernels.woq_hopper import _compile_here; "
            f"print(json.dumps(_compile_here({fmt!r}, {n}, {k}, {group_size}, {prologue!r}, {residual})))")
    env = {**os.environ, "TRITON_INTERPRET": "0", "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, "-c", call], env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode:
        raise RuntimeError(f"compiling the {fmt} product for sm_90 failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _tool(name: str) -> str:
    import triton
    return str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name)


def _compile_here(fmt: str, n: int, k: int, group_size: int, prologue: str, residual: bool) -> dict:
    """compile_for_hopper's work, in the fresh Python it starts."""
    import torch
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.runtime.jit import mangle_type

    from . import gemv as G, woq_gemv as W
    group = group_size if fmt == "int4" else W.INT8_BLOCK
    block_n, g_tile = W.woq_blocks(n, k, fmt, group, 132)
    per_word = W.PLANES[fmt]
    # CPU tensors stand in for the GPU's: only their dtypes matter to the compiler
    x = torch.empty(8, dtype=torch.bfloat16)
    args = dict(WQ=torch.empty(8, dtype=torch.int32),
                S=torch.empty(8, dtype=torch.int32 if fmt == "int4" else torch.float32), X=x, OUT=x, RES=x,
                NORM_W=x, VALS=torch.empty(8), IDX=torch.empty(8, dtype=torch.int32), N=n, K=k,
                stride_w=-(-k // group) * group // per_word, stride_s=k // group if fmt == "int4" else 1,
                stride_x=k, stride_o=n, stride_r=n, eps=1e-5, stride_v=-(-n // block_n), MAGIC=W.MAGIC[fmt])
    constants = dict(M=1, BLOCK_M=2, BLOCK_N=block_n, G_TILE=g_tile, FMT=W.BITS[fmt], GROUP=group,
                     PROLOGUE=G.PROLOGUES[prologue], RESIDUAL=residual, ARGMAX=False, SWIGLU_OUT=0, PDL=True)
    fn = W._woq_gemv_kernel
    signature, constexprs, attrs = {}, {}, {}
    for i, name in enumerate(fn.arg_names):
        if name in constants:
            signature[name] = "constexpr"
            constexprs[(i,)] = constants[name]
            continue
        signature[name] = mangle_type(args[name])
        value = args[name]      # what the launcher tells the compiler: pointers and ints divisible by 16
        if isinstance(value, torch.Tensor) or (isinstance(value, int) and value % 16 == 0):
            attrs[(i,)] = [["tt.divisibility", 16]]
    kernel = triton.compile(ASTSource(fn, signature, constexprs, attrs), target=GPUTarget("cuda", 90, 32),
                            options={"num_warps": W.NUM_WARPS})
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "k.cubin"
        cubin.write_bytes(kernel.asm["cubin"])
        usage = subprocess.run([_tool("cuobjdump"), "-res-usage", str(cubin)], capture_output=True, text=True).stdout
        sass = subprocess.run([_tool("nvdisasm"), "-c", str(cubin)], capture_output=True, text=True).stdout
    found = re.search(r"REG:(\d+).*?STACK:(\d+)", usage)
    counts = collections.Counter(m.group(1).split(".")[0] for m in
                                 re.finditer(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", sass))
    return {"fmt": fmt, "blocks": [block_n, g_tile], "registers": int(found.group(1)) if found else None,
            "stack": int(found.group(2)) if found else None, "sass": dict(counts), "triton": triton.__version__}
