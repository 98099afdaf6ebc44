"""`course-kit bench dtypes`: matmul throughput by dtype (notebook 01's GPU section).

fp32 (tf32 off), tf32, bf16, fp16, fp8 e4m3 through torch._scaled_mm (sm_89+; with and without
fast accumulation) and int8 through torch._int_mm, all on the same shape, in one run. Each
variant is first checked against a float64 matmul of the very same (already rounded) inputs at a
small size; then timed with CUDA events on rotated random non-zero inputs.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

import torch

from .. import bench, device
from ..dtypes import woq
from ..device import default_device

__all__ = ["VARIANTS", "Variant", "make_inputs", "check_variant", "run"]

SIZES = {"smoke": 128, "cpu": 512, "small_gpu": 4096, "full": 8192}
# Relative Frobenius error allowed against float64 on the same inputs (output rounding and
# accumulation order; fast fp8 accumulation is the loosest).
TOLERANCE = {"fp32": 1e-5, "tf32": 5e-3, "bf16": 1e-2, "fp16": 1e-2, "fp8": 2e-2,
             "fp8_fast": 3e-2, "int8": 0.0}


@contextlib.contextmanager
def _fp32_precision(mode: str) -> Iterator[None]:
    """"highest": true fp32 matmuls; "high": tf32 tensor cores allowed. Restored afterwards."""
    old = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(mode)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(old)


@dataclass(frozen=True)
class Variant:
    name: str          # row label
    dtype: str         # key into device.Peaks
    fn: Callable[..., torch.Tensor]
    precision: str = "highest"


def _mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.mm(a, b)


def _fp8_mm(fast: bool) -> Callable[..., torch.Tensor]:
    def mm(a: torch.Tensor, b: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor) -> torch.Tensor:
        out = torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16,
                               use_fast_accum=fast)
        return out[0] if isinstance(out, tuple) else out     # torch < 2.5 returned a tuple
    return mm


def _int8_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch._int_mm(a, b)


VARIANTS: dict[str, Variant] = {
    "fp32": Variant("fp32", "fp32", _mm, "highest"),
    "tf32": Variant("tf32", "tf32", _mm, "high"),
    "bf16": Variant("bf16", "bf16", _mm),
    "fp16": Variant("fp16", "fp16", _mm),
    "fp8": Variant("fp8 e4m3 (_scaled_mm)", "fp8", _fp8_mm(False)),
    "fp8_fast": Variant("fp8 e4m3 (_scaled_mm, fast accum)", "fp8", _fp8_mm(True)),
    "int8": Variant("int8 (_int_mm)", "int8", _int8_mm),
}


def make_inputs(key: str, n: int, dev: str, seed: int = 0, b_col_major: bool = True) -> tuple:
    """Random non-zero inputs for one variant: A [n, n] row-major, B [n, n] column-major by
    default (the layout cuBLASLt wants for fp8 and int8; harmless for the others)."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    if key == "int8":
        # magnitudes 1..127 with random signs: never zero
        def rand_int8() -> torch.Tensor:
            mag = torch.randint(1, 128, (n, n), generator=g)
            sign = torch.randint(0, 2, (n, n), generator=g) * 2 - 1
            return (mag * sign).to(torch.int8).to(dev)
        a8, b8 = rand_int8(), rand_int8()
        return a8, (b8.t() if b_col_major else b8)
    a = torch.randn(n, n, generator=g).to(dev)
    b = torch.randn(n, n, generator=g).to(dev)
    if key in ("fp32", "tf32"):
        return a, b.t()
    if key in ("bf16", "fp16"):
        dt = torch.bfloat16 if key == "bf16" else torch.float16
        return a.to(dt), b.to(dt).t()
    # fp8: N(0, 1) values sit well inside e4m3's range; unit scales
    one = torch.ones((), dtype=torch.float32, device=dev)
    return (a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn).t(), one, one.clone())


def _reference(key: str, args: tuple) -> torch.Tensor:
    a, b = args[0], args[1]
    ref = a.to(torch.float64) @ b.to(torch.float64)
    if key.startswith("fp8"):
        ref = ref * (args[2].double() * args[3].double())
    return ref


def check_variant(key: str, dev: str, n: int = 256, b_col_major: bool = True) -> float:
    """Relative error of the variant against float64 on the same inputs; raises if too large."""
    v = VARIANTS[key]
    args = make_inputs(key, n, dev, seed=1, b_col_major=b_col_major)
    with _fp32_precision(v.precision):
        out = v.fn(*args)
    ref = _reference(key, args)
    err = ((out.to(torch.float64) - ref).norm() / ref.norm()).item()
    if err > TOLERANCE[key]:
        raise AssertionError(f"{v.name} on {dev}: relative error {err:.3g} exceeds "
                             f"{TOLERANCE[key]:g} against float64 on the same inputs")
    return err


def _supported(key: str, dev: str) -> Optional[str]:
    """None when the variant can run here, else the reason it cannot."""
    if dev == "cuda":
        caps = device.capabilities()
        if key in ("tf32", "bf16") and not caps.bf16_tensor_cores:
            return f"{key} tensor cores need sm_80+ (this GPU is {caps.sm})"
        if key.startswith("fp8") and not caps.fp8:
            return f"fp8 matmul (torch._scaled_mm) needs sm_89+ (this GPU is {caps.sm})"
    if key.startswith("fp8") and not hasattr(torch, "float8_e4m3fn"):
        return f"torch {torch.__version__} has no float8_e4m3fn"
    return None


@bench.topic("dtypes", help="matmul TFLOP/s by dtype: fp32, tf32, bf16, fp16, fp8, int8")
def run(params: dict) -> dict:
    """Check every variant, then time them all on n x n x n with rotated inputs."""
    dev = params.get("device") or default_device()
    size = params.get("size", "smoke")
    n = int(params.get("n", SIZES.get(size, 128)))
    repeat = int(params.get("repeat", 30 if size == "full" else 10))
    rotate = int(params.get("rotate", 3 if dev == "cuda" else 1))
    wanted = params.get("variants") or list(VARIANTS)
    if isinstance(wanted, str):                          # from the CLI: "bf16,fp8_fast"
        wanted = [w.strip() for w in wanted.split(",")]
    unknown = [k for k in wanted if k not in VARIANTS]
    if unknown:
        raise ValueError(f"unknown variants {unknown}; choose from {list(VARIANTS)}")
    keys = list(wanted)
    if dev != "cuda":
        keys = [k for k in keys if k != "tf32"]          # tf32 is a GPU tensor-core mode
    pk = device.peaks() if dev == "cuda" else None
    rows: list[dict] = []
    for key in bench.progress(keys, desc="dtypes"):
        v = VARIANTS[key]
        row = {"name": v.name, "dtype": v.dtype, "variant": key, "n": n}
        reason = _supported(key, dev)
        col = True
        for col in ((True, False) if key == "int8" else (True,)):
            if reason is not None:
                break
            try:      # int8: retry with a row-major B should this build refuse column-major
                row["rel_error_vs_fp64"] = check_variant(key, dev, b_col_major=col)
                break
            except (RuntimeError, NotImplementedError, TypeError) as err:
                if key != "int8" or not col:
                    reason = f"{type(err).__name__}: {str(err).splitlines()[0][:160]}"
        if reason is not None:
            rows.append({**row, "skipped": reason})
            continue
        row["b_layout"] = "column-major" if col else "row-major"
        inputs = [make_inputs(key, n, dev, seed=s, b_col_major=col) for s in range(rotate)]
        with _fp32_precision(v.precision):
            t = bench.guard_oom(lambda: bench.timeit(v.fn, warmup=5, repeat=repeat,
                                                     inputs=inputs, device=dev),
                                what=f"{v.name} at n={n}")
        del inputs
        if isinstance(t, bench.Skipped):
            rows.append({**row, "skipped": t.reason})
            continue
        tflops = 2 * n ** 3 / t.median_s / 1e12
        peak = pk.tflops(v.dtype) if pk else None
        rows.append({**row, "tflops": tflops, "median_s": t.median_s, "spread": t.spread,
                     "peak_tflops": peak, "fraction_of_peak": tflops / peak if peak else None})
    wo_rows = weight_only(dev, n, int(params.get("wo_rows", 16)), repeat, rotate,
                          int(params.get("group_size", 128)))
    summary = summarise(rows)
    summary.update(summarise_weight_only(wo_rows))
    return {"params": {"n": n, "repeat": repeat, "rotate": rotate, "device": dev,
                       "weight_only": {"m": int(params.get("wo_rows", 16)), "group_size": int(params.get("group_size", 128))}},
            "results": rows, "weight_only": wo_rows, "summary": summary}


WO_TOLERANCE = 2e-2   # bf16 output rounding against the fp32 matmul of the dequantised weights


def _wo_case(kind: str, w: torch.Tensor, dev: str, group_size: int) -> tuple[Callable, torch.Tensor]:
    """A function of x for one weight format, and the dequantised weights it multiplies by (fp32)."""
    if kind == "bf16":
        wb = w.to(device=dev, dtype=torch.bfloat16)
        return (lambda x: torch.nn.functional.linear(x, wb)), wb.float()
    if kind == "int8":
        q, sc = woq.quantize_int8(w)
        q, sc = q.to(dev), sc.to(dev)
        return (lambda x: woq.int8_weight_only_mm(x, q, sc)[0]), woq.dequantize_int8(q, sc)
    q, sz = woq.quantize_int4(w, group_size)
    packed, sz_d = woq.pack_int4(q, dev), sz.to(dev)
    return (lambda x: woq.int4_weight_only_mm(x, packed, sz_d, group_size)[0]), \
        woq.dequantize_int4(q, sz.to(torch.bfloat16), group_size).to(dev)


def weight_only(dev: str, n: int, m: int = 16, repeat: int = 10, rotate: int = 1,
                group_size: int = 128) -> list[dict]:
    """Decode-shaped matmuls, x[m, n] bf16 @ W[n, n]^T with W in bf16, int8 or int4 (weight-only):
    each checked against the fp32 matmul of its dequantised weights, then timed on rotated weights.
    Rows: time, weight bytes, weight GB/s, error against the dequantised oracle and the bf16 weights."""
    g = torch.Generator().manual_seed(0)
    rows: list[dict] = []
    # int4 groups must divide K = n: the requested size, else the largest kernel-supported one that does
    group_size = next((s for s in (group_size, 256, 128, 64, 32) if s in (32, 64, 128, 256) and n % s == 0), 0)
    for kind in ("bf16", "int8", "int4"):
        row = {"name": f"{kind} weights", "kind": kind, "m": m, "n": n, "group_size": group_size if kind == "int4" else None}
        if kind == "int4" and not group_size:
            rows.append({**row, "skipped": f"no int4 group size (32..256) divides n={n}"})
            continue
        if kind == "int4" and woq.int4_unavailable(dev):
            rows.append({**row, "skipped": woq.int4_unavailable(dev)})
            continue
        try:
            # correctness at a small size first, on this device's kernel
            ws = torch.randn(256, 512, generator=g)
            xs = torch.randn(8, 512, generator=g).to(device=dev, dtype=torch.bfloat16)
            fn, deq = _wo_case(kind, ws, dev, min(group_size, 128))
            out = fn(xs)
            ref = xs.double() @ deq.double().T
            err = ((out.double() - ref).norm() / ref.norm()).item()
            if err > WO_TOLERANCE:
                raise AssertionError(f"{kind} weight-only matmul on {dev}: relative error {err:.3g} exceeds "
                                     f"{WO_TOLERANCE:g} against the dequantised fp32 weights")
            row["rel_error_vs_dequantised"] = err
            row["quantisation_error"] = ((deq.cpu().double() - ws.double()).norm() / ws.double().norm()).item()
            row["kernel"] = (woq.int8_weight_only_mm(xs, *woq.quantize_int8(ws.to(dev)))[1] if kind == "int8" else
                             "aten.linear (bf16)" if kind == "bf16" else
                             ("aten._weight_int4pack_mm_for_cpu" if dev == "cpu" else "aten._weight_int4pack_mm"))
            weights = [torch.randn(n, n, generator=g) for _ in range(max(rotate, 1))]
            fns = [_wo_case(kind, w, dev, group_size)[0] for w in weights]
            x = torch.randn(m, n, generator=g).to(device=dev, dtype=torch.bfloat16)
            del weights
        except (RuntimeError, NotImplementedError, TypeError, AttributeError) as err:
            rows.append({**row, "skipped": f"{type(err).__name__}: {str(err).splitlines()[0][:160]}"})
            continue
        t = bench.guard_oom(lambda: bench.timeit(lambda f: f(x), warmup=5, repeat=repeat,
                                                 inputs=[(f,) for f in fns], device=dev),
                            what=f"{kind} weight-only matmul at n={n}")
        del fns
        if isinstance(t, bench.Skipped):
            rows.append({**row, "skipped": t.reason})
            continue
        nbytes = woq.weight_bytes(n, n, kind, group_size)
        rows.append({**row, "median_s": t.median_s, "spread": t.spread, "weight_bytes": nbytes,
                     "weight_gbs": nbytes / t.median_s / 1e9})
    return rows


def summarise_weight_only(rows: list[dict]) -> dict:
    """Speed of the int8 and int4 weight-only matmuls against bf16 weights, measured in the same run."""
    t = {r["kind"]: r.get("median_s") for r in rows}
    out = {}
    for k in ("int8", "int4"):
        if t.get(k) and t.get("bf16"):
            out[f"{k}_weight_only_speedup_vs_bf16"] = t["bf16"] / t[k]
    return out


def summarise(rows: list[dict]) -> dict:
    """Ratios against the peers measured in the same run."""
    by = {r["variant"]: r.get("tflops") for r in rows}
    out: dict = {f"{k}_tflops": v for k, v in by.items()}

    def ratio(a: str, b: str) -> Optional[float]:
        return by[a] / by[b] if by.get(a) and by.get(b) else None

    out.update({
        "fp8_fast_over_bf16": ratio("fp8_fast", "bf16"),
        "fp8_over_bf16": ratio("fp8", "bf16"),
        "int8_over_bf16": ratio("int8", "bf16"),
        "bf16_over_fp32": ratio("bf16", "fp32"),
        "tf32_over_fp32": ratio("tf32", "fp32"),
        "fp16_over_bf16": ratio("fp16", "bf16"),
    })
    return out
