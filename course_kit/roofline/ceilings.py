"""The two ceilings every later notebook is placed against: memory bandwidth and matmul FLOP/s.

A kernel that does I FLOPs per byte it moves can run no faster than min(peak FLOP/s, I x bandwidth).
Here both ceilings are measured on the machine at hand, not copied from a datasheet.
"""
from __future__ import annotations

import contextlib

import torch

from ..bench import Timing, timeit
from ..device import default_device

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
    device = device or default_device()
    if dtypes is None:
        from ..device import capabilities
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


# ---------------------------------------------------------------------------------------------
# Placing an operation under the ceilings (notebook 00's roofline explorer)
# ---------------------------------------------------------------------------------------------
DTYPE_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1}

# op -> (FLOPs, bytes moved at 1 byte per element) as functions of the size n and the batch b.
# Bytes count each input read once and each output written once (the ideal a fused kernel reaches).
OPS = {
    "vector add x + y": (lambda n, b: float(n), lambda n, b: 3.0 * n),
    "matrix-vector (decode, n x n weights)": (lambda n, b: 2.0 * n * n * b, lambda n, b: n * n + 2.0 * n * b),
    "square matmul n x n x n": (lambda n, b: 2.0 * n ** 3, lambda n, b: 3.0 * n * n),
}


def op_cost(op: str, n: int, dtype: str = "bf16", batch: int = 1) -> dict:
    """FLOPs, bytes and arithmetic intensity of `op` at size n (batch rows for matrix-vector)."""
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}; choose one of {list(OPS)}")
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {dtype!r}; choose one of {list(DTYPE_BYTES)}")
    if not (isinstance(n, int) and n >= 1) or not (isinstance(batch, int) and batch >= 1):
        raise ValueError(f"n and batch must be ints >= 1, got n={n!r}, batch={batch!r}")
    flops_fn, elems_fn = OPS[op]
    flops, nbytes = flops_fn(n, batch), elems_fn(n, batch) * DTYPE_BYTES[dtype]
    return {"op": op, "n": n, "batch": batch, "dtype": dtype, "flops": flops, "bytes": nbytes,
            "intensity": flops / nbytes}


def place(cost: dict, bandwidth_gbs: float, ceilings_tflops: dict[str, float]) -> dict:
    """Where an op sits under one machine's measured ceilings: the ceiling used (its dtype's, else the
    fastest measured dtype that machine has, named), the ridge point, memory- or compute-bound, the
    attainable TFLOP/s and the shortest possible time."""
    if bandwidth_gbs <= 0 or not ceilings_tflops:
        raise ValueError(f"need a positive bandwidth and at least one ceiling, got {bandwidth_gbs!r}, "
                         f"{ceilings_tflops!r}")
    dtype = cost["dtype"] if cost["dtype"] in ceilings_tflops else max(ceilings_tflops, key=ceilings_tflops.get)
    peak = ceilings_tflops[dtype]
    ridge = peak * 1e3 / bandwidth_gbs
    memory_tflops = cost["intensity"] * bandwidth_gbs / 1e3
    attainable = min(peak, memory_tflops)
    return {"ceiling_dtype": dtype, "substituted": dtype != cost["dtype"], "peak_tflops": peak, "ridge": ridge,
            "bound": "memory" if cost["intensity"] < ridge else "compute", "attainable_tflops": attainable,
            "min_time_s": cost["flops"] / (attainable * 1e12)}


def explain_place(cost: dict, here: dict, ref: dict | None = None, here_name: str = "this machine",
                  ref_name: str = "the reference GPU") -> str:
    """One paragraph: the op's intensity, and on each machine its bound, attainable rate and time."""
    from ..narrate import speed

    def one(p: dict, name: str) -> str:
        sub = (f" (no {cost['dtype']} ceiling measured there: its {p['ceiling_dtype']} ceiling is used)"
               if p["substituted"] else "")
        side = "left" if p["bound"] == "memory" else "right"
        return (f"on {name}{sub} the ridge is at {p['ridge']:,.1f} FLOP/B, so it sits to its {side}: "
                f"**{p['bound']}-bound**, at most {p['attainable_tflops']:,.3g} TFLOP/s, "
                f"{_fmt_time(p['min_time_s'])} at best")
    batch = f", batch {cost['batch']}" if cost["op"].startswith("matrix-vector") else ""
    text = (f"{cost['op']} at n = {cost['n']:,}{batch} in {cost['dtype']}: {cost['flops']:,.3g} FLOPs over "
            f"{cost['bytes']:,.3g} bytes, an arithmetic intensity of **{cost['intensity']:,.3g} FLOP/B**. "
            + _cap(one(here, here_name)) + ".")
    if ref is not None:
        text += (" " + _cap(one(ref, ref_name)) + f"; there it would run "
                 f"{speed(ref['min_time_s'], here['min_time_s'])} here.")
    return text


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:]


def _fmt_time(s: float) -> str:
    for unit, f in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if s >= f:
            return f"{s / f:,.3g} {unit}"
    return f"{s / 1e-9:,.3g} ns"


def explain_copy(own_gbs: float, ref_gbs: float | None = None, ref_gpu: str = "the reference GPU",
                 spec_gbs: float | None = None, spec_name: str = "") -> str:
    """Notebook 00 section 3: this machine's copy bandwidth, against the datasheet and the reference."""
    from ..narrate import rate
    text = f"This machine copies at **{own_gbs:,.0f} GB/s** (read + write; 1 GB/s = 10^9 bytes per second)."
    if spec_gbs:
        text += f" The {spec_name} datasheet promises {spec_gbs:,.0f} GB/s: **{own_gbs / spec_gbs:.0%}** of it."
    if ref_gbs:
        text += (f" The reference {ref_gpu} measured **{ref_gbs:,.0f} GB/s**: it copies "
                 f"{rate(ref_gbs, own_gbs)} this machine.")
    return text


def explain_timing(cold_s: float, warm_s: float, spread: float, repeat: int, unsync_s: float | None = None) -> str:
    """Notebook 00 section 2: the first call against warm calls, and a host clock with no synchronise
    against the real time of the work (GPU only)."""
    from ..narrate import speed
    text = (f"First call: **{cold_s * 1e3:.2f} ms**; median of {repeat} warm calls: **{warm_s * 1e3:.2f} ms** "
            f"(p10-p90 spread {spread:.0%}): the first call ran {speed(cold_s, warm_s)} a warm one.")
    if unsync_s is not None:
        text += f" A host clock with no synchronise says **{unsync_s * 1e6:.0f} µs**"
        if unsync_s < warm_s:
            text += (f": it timed the launch, {warm_s / unsync_s:,.0f}x shorter than the work really takes.")
        else:
            text += ": here it was not shorter than the synchronised time (the launch queue was full or the work tiny)."
    return text
