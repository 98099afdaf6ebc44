"""Where weight-only quantisation pays: a weight-only product under notebook 00's roofline (notebook 01 §7).

A product y[M, N] = x[M, K] @ W[N, K]^T moves its weights once, whatever M, and does 2 M N K
FLOPs. With b bytes per weight it takes at least

    t(M) = max(bytes / copy bandwidth, 2 M N K / matmul peak),   bytes = N K b + 2 M (N + K)

(activations in and out in bf16). At small M the first term wins: the product is memory-bound
and its time is its bytes, so int8 (b ~ 1) and int4 (b ~ 0.53) run up to 2x and ~3.8x faster
than bf16 (b = 2). As M grows the second term catches up: a format turns compute-bound at the
batch where the two are equal, int4 first, then int8, then bf16. In between, a quantised product
is compute-bound while bf16 is still memory-bound, so its advantage shrinks; past bf16's own
crossing every format does the same FLOPs at the same peak (the kernels dequantise into bf16
tensor-core inputs), and quantisation stops paying. That is the ideal: a real kernel's
dequantising costs instructions, so it stops paying earlier, which the measured curve shows
(`course-kit bench woq`).
"""
from __future__ import annotations

import math

FORMATS = ("bf16", "int8", "int4")


def bytes_per_weight(fmt: str, group_size: int = 128, k: int | None = None) -> float:
    """Bytes a format stores per weight: bf16 2; int8 1 plus a 4-byte scale per row of K weights
    (K given); int4 a half plus a bf16 scale and zero (4 bytes) per group."""
    if fmt == "bf16":
        return 2.0
    if fmt == "int8":
        return 1.0 + (4.0 / k if k else 0.0)
    if fmt == "int4":
        if group_size < 1:
            raise ValueError(f"group_size must be >= 1, got {group_size}")
        return 0.5 + 4.0 / group_size
    raise ValueError(f"unknown format {fmt!r}; choose one of {FORMATS}")


def _check(m: float, n: int, k: int, copy_gbs: float, matmul_tflops: float) -> None:
    if m < 1 or n < 1 or k < 1:
        raise ValueError(f"M, N and K must be >= 1, got M={m}, N={n}, K={k}")
    if copy_gbs <= 0 or matmul_tflops <= 0:
        raise ValueError(f"the ceilings must be positive, got {copy_gbs} GB/s and {matmul_tflops} TFLOP/s")


def predict(fmt: str, m: int, n: int, k: int, copy_gbs: float, matmul_tflops: float, group_size: int = 128) -> dict:
    """The roofline's shortest time for one weight-only product: bytes, FLOPs, both bounds, which one
    binds, and the time (seconds)."""
    _check(m, n, k, copy_gbs, matmul_tflops)
    nbytes = n * k * bytes_per_weight(fmt, group_size, k) + 2.0 * m * (n + k)
    flops = 2.0 * m * n * k
    memory_s, compute_s = nbytes / (copy_gbs * 1e9), flops / (matmul_tflops * 1e12)
    return {"format": fmt, "m": m, "n": n, "k": k, "bytes": nbytes, "flops": flops, "memory_s": memory_s,
            "compute_s": compute_s, "time_s": max(memory_s, compute_s),
            "bound": "memory" if memory_s >= compute_s else "compute"}


def compute_bound_batch(fmt: str, n: int, k: int, copy_gbs: float, matmul_tflops: float,
                        group_size: int = 128) -> float:
    """The batch M at which the product's two bounds are equal: below it memory-bound, above it
    compute-bound. Solves N K b + 2 M (N + K) = 2 M N K x (copy / peak) for M."""
    _check(1, n, k, copy_gbs, matmul_tflops)
    ridge = matmul_tflops * 1e12 / (copy_gbs * 1e9)          # FLOP per byte where the roofline bends
    per_m = 2.0 * n * k / ridge - 2.0 * (n + k)             # bytes of compute time gained per row of M
    if per_m <= 0:
        return math.inf                                     # activations alone keep it memory-bound
    return n * k * bytes_per_weight(fmt, group_size, k) / per_m


def crossings(n: int, k: int, copy_gbs: float, matmul_tflops: float, group_size: int = 128) -> dict:
    """For each quantised format: the batch where it turns compute-bound (its advantage starts to
    shrink) and the batch where it stops paying against bf16 (bf16's own crossing, in the ideal)."""
    bf16 = compute_bound_batch("bf16", n, k, copy_gbs, matmul_tflops, group_size)
    out = {"bf16": {"compute_bound_from": bf16}}
    for fmt in ("int8", "int4"):
        out[fmt] = {"compute_bound_from": compute_bound_batch(fmt, n, k, copy_gbs, matmul_tflops, group_size),
                    "stops_paying_at": bf16,
                    "speedup_at_batch_1": predict("bf16", 1, n, k, copy_gbs, matmul_tflops, group_size)["time_s"]
                    / predict(fmt, 1, n, k, copy_gbs, matmul_tflops, group_size)["time_s"]}
    return out


def curve(fmt: str, ms: list[int], n: int, k: int, copy_gbs: float, matmul_tflops: float,
          group_size: int = 128) -> list[dict]:
    """predict() at each batch size in `ms`."""
    return [predict(fmt, m, n, k, copy_gbs, matmul_tflops, group_size) for m in ms]


def measured_stop(rows: list[dict], fmt: str, shape: str) -> dict:
    """From a record's peer rows of one shape: the measured batches where `fmt` was faster than bf16
    and those where it was not, and the largest of the first and smallest of the second."""
    times = {}
    for r in rows:
        if r.get("shape") == shape and r.get("median_s"):
            times.setdefault(r["m"], {})[r["format"]] = r["median_s"]
    faster = [m for m, t in sorted(times.items()) if fmt in t and "bf16" in t and t[fmt] < t["bf16"]]
    slower = [m for m, t in sorted(times.items()) if fmt in t and "bf16" in t and t[fmt] >= t["bf16"]]
    return {"faster_at": faster, "slower_at": slower, "last_faster": max(faster) if faster else None,
            "first_slower": min(slower) if slower else None}


# ----------------------------------------------------------------------------- a record, read back

def course_kernel_row(results: list[dict], shape: str, fmt: str) -> dict | None:
    """The course's own kernel for `shape` ("<model> <product>") at M = 1 in a bench woq record: the
    product row, timed as the step launches it."""
    return next((r for r in results if r.get("kind") == "product" and r.get("median_s") and r.get("format") == fmt
                 and f"{r.get('model')} {r.get('product')}" == shape), None)


def point(record: dict, shape: str, fmt: str, m: int) -> dict:
    """One (shape, format, batch) of a bench woq record: bytes and FLOPs, the roofline's time from the
    record's own ceilings, and the recorded time (the course's fused kernel at M = 1, else torch's
    peer at that M), with bf16's recorded time at the same M."""
    s = record["summary"]
    entry = (s.get("crossing") or {}).get(shape)
    if entry is None:
        raise ValueError(f"no product shape {shape!r} in this record; it has {sorted(s.get('crossing') or {})}")
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; choose one of {FORMATS}")
    pred = predict(fmt, m, entry["n"], entry["k"], s["copy_gbs"], s["matmul_tflops"],
                   record.get("params", {}).get("group_size", 128))
    out = {"shape": shape, "format": fmt, "m": m, "bytes": pred["bytes"], "flops": pred["flops"],
           "predicted_s": pred["time_s"], "bound": pred["bound"], "measured_s": None, "kernel": None,
           "why_not": None, "bf16_measured_s": None}

    def recorded(f: str) -> dict | None:
        if m == 1 and course_kernel_row(record["results"], shape, f) is not None:
            row = course_kernel_row(record["results"], shape, f)
            return {**row, "kernel": f"course {f} kernel, M = 1, launched as in the step"}
        return next((r for r in record["results"] if r.get("kind") == "peer" and r.get("shape") == shape
                     and r.get("format") == f and r.get("m") == m), None)

    mine = recorded(fmt)
    if mine is not None and mine.get("median_s"):
        out.update(measured_s=mine["median_s"], kernel=mine["kernel"])
    elif mine is not None:
        out["why_not"] = mine.get("skipped") or mine.get("error")
    base = recorded("bf16")
    if base is not None and base.get("median_s"):
        out["bf16_measured_s"] = base["median_s"]
    return out


def shapes(record: dict) -> list[str]:
    """The product shapes a bench woq record holds (its crossings' keys), in the record's order."""
    return list((record.get("summary") or {}).get("crossing") or {})


def batches(record: dict) -> list[int]:
    """Powers of two up to 1024 and every batch the record measured, sorted."""
    measured = {r["m"] for r in record.get("results", []) if r.get("kind") == "peer"}
    return sorted({2 ** i for i in range(11)} | measured)
