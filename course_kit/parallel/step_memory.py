"""The peak memory of one training step, measured on a GPU and on a CPU (notebook 09, §9).

On a GPU, the caching allocator counts: the peak of `torch.cuda.max_memory_allocated` during the
step, minus what was allocated when it started. A CPU has no such counter, so there the profiler
records every allocation and free of the step (`profile_memory=True`: one "[memory]" event per
call with its signed size) and the running sum of those events gives the bytes live at each
moment, whose maximum is the step's peak beyond what it started with. Both count tensors only
(not the Python objects or the allocator's cached, unused blocks).
"""
from __future__ import annotations

import os
from typing import Any, Callable

import torch


def _cuda_peak(fn: Callable[[], Any], dev: torch.device) -> tuple[int, Any]:
    torch.cuda.synchronize(dev)
    base = torch.cuda.memory_allocated(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    out = fn()
    torch.cuda.synchronize(dev)
    return int(torch.cuda.max_memory_allocated(dev) - base), out


def _cpu_peak(fn: Callable[[], Any]) -> tuple[int, Any]:
    from torch.profiler import ProfilerActivity, profile
    # Kineto prints a "profiler_start/stop" line on every use; notebooks would show it in every cell.
    os.environ.setdefault("KINETO_LOG_LEVEL", "99")
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = fn()
    events = [e for e in prof.profiler.kineto_results.events()
              if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU]
    live = peak = 0
    for e in sorted(events, key=lambda e: e.start_ns()):
        live += e.nbytes()          # an allocation is positive, a free negative
        peak = max(peak, live)
    return int(peak), out


def step_peak_bytes(fn: Callable[[], Any], device: str | torch.device = "cpu") -> tuple[int, Any]:
    """(peak bytes allocated while fn() ran, beyond what was allocated when it started; fn's result)."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return _cuda_peak(fn, dev)
    if dev.type != "cpu":
        raise ValueError(f"device {dev} has no memory counter here; use 'cpu' or 'cuda'")
    return _cpu_peak(fn)
