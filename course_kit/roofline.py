"""The two ceilings every later notebook is placed against: memory bandwidth and matmul FLOP/s.

A kernel that does I FLOPs per byte it moves can run no faster than min(peak FLOP/s, I x bandwidth).
Here both ceilings are measured on the machine at hand, not copied from a datasheet.
"""
from __future__ import annotations

import contextlib

import torch

from .bench import Timing, timeit

MATMUL_DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def copy_bandwidth(n_bytes: int, device: str = "cpu", repeat: int = 20) -> dict:
    """Device-to-device copy `dst.copy_(src)`; bandwidth counts bytes read plus bytes written.

    Two source/destination pairs are used in turn so that no copy finds its data still in cache.
    """
    if n_bytes < 1024:
        raise ValueError(f"n_bytes must be at least 1024, got {n_bytes}")
    n = n_bytes // 4
    pairs = [(torch.randn(n, device=device), torch.empty(n, device=device)) for _ in range(2)]
    timing = timeit(lambda src, dst: dst.copy_(src), inputs=pairs, repeat=repeat, device=device)
    moved = 2 * n * 4
    return {"name": "copy", "bytes": moved, "gbs": moved / timing.median_s / 1e9, "timing": timing.as_dict()}


@contextlib.contextmanager
def _tf32(enabled: bool):
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def matmul_rate(n: int, dtype: str = "bf16", device: str = "cpu", repeat: int = 20) -> dict:
    """TFLOP/s of an n x n x n matmul (2 n^3 FLOPs) on random data, inputs rotated past the L2 cache.

    `fp32` runs with TF32 off (strict IEEE fp32); `tf32` lets cuBLAS use TF32 tensor cores.
    """
    if dtype not in MATMUL_DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; choose one of {sorted(MATMUL_DTYPES)}")
    if n < 16:
        raise ValueError(f"n must be at least 16, got {n}")
    torch_dtype = MATMUL_DTYPES[dtype]
    sets = [(torch.randn(n, n, device=device, dtype=torch_dtype), torch.randn(n, n, device=device, dtype=torch_dtype))
            for _ in range(3)]
    with _tf32(dtype == "tf32"):
        timing: Timing = timeit(torch.matmul, inputs=sets, repeat=repeat, device=device)
    flops = 2 * n ** 3
    return {"name": f"matmul_{dtype}", "n": n, "flops": flops, "tflops": flops / timing.median_s / 1e12,
            "timing": timing.as_dict()}


def measure(copy_mib: int, matmul_n: int, repeat: int = 20, device: str | None = None,
            dtypes: list[str] | None = None) -> list[dict]:
    """Copy bandwidth and the matmul rate for each dtype this device runs natively."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if dtypes is None:
        from .device import capabilities
        caps = capabilities() if device == "cuda" else capabilities(None)
        # A CPU without matrix units runs bf16 far slower than fp32, so only fp32 is its ceiling.
        dtypes = ["fp32"] + (["tf32"] if caps.tf32 else []) + \
            (["bf16"] if caps.bf16_tensor_cores else []) + (["fp16"] if device == "cuda" else [])
    rows = [copy_bandwidth(copy_mib * 2**20, device, repeat)]
    rows += [matmul_rate(matmul_n, d, device, repeat) for d in dtypes]
    return rows


def summarise(rows: list[dict], spec=None) -> dict:
    """The ceilings for a roofline: copy GB/s and TFLOP/s per dtype, and their fraction of the spec."""
    copy = next(r for r in rows if r["name"] == "copy")
    rates = {r["name"].removeprefix("matmul_"): r["tflops"] for r in rows if r["name"].startswith("matmul_")}
    out = {"copy_gbs": copy["gbs"], "matmul_tflops": rates}
    if spec is not None:
        out["spec"] = {"name": spec.name, "hbm_gbs": spec.hbm_gbs,
                       **{d: spec.tflops(d) for d in ("fp32", "tf32", "bf16", "fp16", "fp8")}}
        out["fraction_of_spec"] = {"copy": copy["gbs"] / spec.hbm_gbs,
                                   **{d: r / spec.tflops(d) for d, r in rates.items() if spec.tflops(d)}}
    return out
