"""`course-kit bench streams`: the CUDA stream demonstrations of notebook 07, with their timelines.

Checks first (the racy variants must be wrong and the fixed ones right), then records times and
timelines so that a CPU-only learner can see what ran where on the GPU.
"""
from __future__ import annotations


from .. import bench
from ..streams import gpu
from ..device import has_cuda


def _tl(t) -> list[dict]:
    return t.to_records(max_spans=400)


@bench.topic("streams", help="CUDA streams: concurrency, events, races and copy/compute overlap")
def run(params: dict) -> dict:
    if not has_cuda():
        raise RuntimeError("`course-kit bench streams` needs a CUDA GPU")
    n_streams = int(params.get("n_streams", 4))
    kernel_ms = float(params.get("kernel_ms", 2.0))
    mbytes = int(params.get("copy_mbytes", 256 if params.get("size") == "full" else 64))
    results, timelines = [], {}

    # Correctness of the race demonstrations: racy must be wrong, fixed must be right.
    wait = gpu.missing_wait_demo()
    rs = gpu.missing_record_stream_demo()
    for name, r in {**wait, **rs}.items():
        results.append({"name": name, "correct": r["correct"], "y_mean": r["y_mean"],
                        "expected": r["expected"], "memory_reused": r.get("memory_reused")})
        timelines[name] = _tl(r["timeline"])
    checks = {
        "missing wait is wrong": not wait["racy (no wait)"]["correct"],
        "wait_event fixes it": wait["fixed (wait_event)"]["correct"],
        "wait_stream fixes it": wait["fixed (wait_stream)"]["correct"],
        "missing record_stream is wrong": not rs["racy (no record_stream)"]["correct"],
        "record_stream fixes it": rs["fixed (record_stream)"]["correct"],
    }

    conc = {}
    for kind in ("spin", "matmul"):
        c = gpu.concurrency_demo(n_streams=n_streams, kind=kind, kernel_ms=kernel_ms)
        conc[kind] = c
        for mode in ("one stream", "one stream each"):
            results.append({"name": f"{kind} x{n_streams}: {mode}", "ms": c[mode]["ms"]})
            timelines[f"{kind}: {mode}"] = _tl(c[mode]["timeline"])

    legacy = gpu.legacy_default_stream_demo(kernel_ms=kernel_ms)
    for name in (n for n in legacy if n != "blocking_available"):
        results.append({"name": f"legacy default stream: {name}", "ms": legacy[name]["ms"]})
        timelines[f"legacy: {name}"] = _tl(legacy[name]["timeline"])

    copy = gpu.copy_overlap_demo(mbytes=mbytes)
    for name, v in copy["variants"].items():
        results.append({"name": name, "ms": v["total_ms"], "host_blocked_ms": v["host_blocked_ms"],
                        "speedup_vs_serial": v["speedup_vs_serial"], "correct": v["correct"]})
        timelines[name] = _tl(v["timeline"])
        checks[f"{name}: data correct"] = v["correct"]

    summary = {
        "checks_passed": all(checks.values()),
        "checks": checks,
        "spin_concurrency_speedup": conc["spin"]["speedup"],
        "matmul_concurrency_speedup": conc["matmul"]["speedup"],
        "blocking_streams_available": legacy["blocking_available"],
        "legacy_blocking_vs_nonblocking": (
            legacy["blocking streams (cudaStreamCreate)"]["ms"]
            / legacy["non-blocking streams (PyTorch's)"]["ms"] if legacy["blocking_available"] else None),
        "copy_ms": copy["copy_ms"],
        "pinned_overlap_speedup": copy["variants"]["copy stream: pinned, non_blocking"][
            "speedup_vs_serial"],
        "pageable_overlap_speedup": copy["variants"]["copy stream: pageable, non_blocking"][
            "speedup_vs_serial"],
    }
    return {"params": {"n_streams": n_streams, "kernel_ms": kernel_ms, "copy_mbytes": mbytes},
            "results": results, "summary": summary, "timelines": timelines}
