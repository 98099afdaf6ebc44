"""Kernels launched per call, from the profiler (GPU), and the top kernels for explanations."""
from __future__ import annotations

import re
from typing import Any, Callable

import torch

from ..device import has_cuda

# Host-side API calls that launch work on the GPU: one per eager kernel, one per CUDA-graph replay
# (cudaLaunchKernel, cudaLaunchKernelExC, cuLaunchKernel(Ex) from Triton, cudaGraphLaunch, ...).
_LAUNCH_CALL = re.compile(r"^cu(da)?(Graph)?Launch")


def _device_time_us(evt: Any) -> float:
    for attr in ("device_time_total", "cuda_time_total"):  # renamed in torch 2.4+
        if hasattr(evt, attr):
            return float(getattr(evt, attr))
    return 0.0


def profile_launches(fn: Callable, *args: Any, calls: int = 3, top: int = 8) -> dict:
    """Profile `calls` calls of fn(*args) (already warmed up) on a GPU: launch calls and GPU kernels
    per call, and the `top` kernels by GPU time."""
    if not has_cuda():
        raise RuntimeError("profile_launches needs a CUDA GPU")
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn(*args)
        torch.cuda.synchronize()
    launches, kernels, total_us, rows = 0, 0, 0.0, []
    for evt in prof.key_averages():
        if _LAUNCH_CALL.match(evt.key) and evt.device_type != torch.autograd.DeviceType.CUDA:
            launches += evt.count
        elif evt.device_type == torch.autograd.DeviceType.CUDA and "memcpy" not in evt.key.lower() \
                and "memset" not in evt.key.lower() and not is_annotation(evt):
            kernels += evt.count
            total_us += _device_time_us(evt)
            rows.append({"kernel": evt.key[:120], "count": evt.count / calls,
                         "gpu_us_per_call": _device_time_us(evt) / calls})
    rows.sort(key=lambda r: -r["gpu_us_per_call"])
    return {"launch_calls_per_call": launches / calls, "gpu_kernels_per_call": kernels / calls,
            "gpu_us_per_call_total": total_us / calls, "top_kernels": rows[:top],
            "kernels_complete": KERNELS_COMPLETE}


# A record made since kernels named after lambdas count (below) says so; older ones lack the key, and
# their kernel counts and times are lower bounds.
KERNELS_COMPLETE = "kernels named after lambdas included"

# the names of ranges, never of kernels: "## Call CompiledFxGraph fxyz ##", "Optimizer.step#AdamW.step".
# A bare '#' is no sign: PyTorch's own kernels are named after lambdas, "...{lambda(int)#1}...", and
# counting '#' dropped 792 of the 1,488 kernels of 05's eager step from the 2026-11-30 record.
_RANGE_NAME = re.compile(r"^(## .* ##|[\w.]+#[\w.]+)$")


def is_annotation(evt: Any) -> bool:
    """A GPU-side user range (e.g. "Optimizer.step#AdamW.step", "## Call CompiledFxGraph ##"), which
    spans kernels instead of being one: counting it would count their time twice."""
    return bool(getattr(evt, "is_user_annotation", False)) or bool(_RANGE_NAME.match(evt.key))


def op_cost_s(device: str = "cpu", repeat: int = 200) -> float:
    """What one operator costs when its work is nothing: the median time of a one-element add,
    launch and dispatch included (a synchronised host clock on a GPU, like every steady timing)."""
    from .. import bench
    x = torch.ones(1, device=device)
    return bench.timeit(lambda: x.add(1.0), warmup=20, repeat=repeat, device=device).median_s
