"""Running code under `torch.profiler`, in a pass of its own, and keeping what it saw.

The timed pass of a measurement stays unprofiled; the profiled pass runs the same work again, and
the ratio of the two wall times is the profiler's overhead, reported with every figure read from it
(DESIGN.md). The profiler slows the host (it records every operator and launch), not the kernels,
so `corrected_idle` also gives the idle the unprofiled run would have had if its kernels took the
same GPU time: 1 - busy / unprofiled wall time.

Steps are marked with `record_function("step k")` (the engine marks its own; `profile_steps` marks
each call), and the whole run with `record_function("window")`, which is the measured window.
"""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch

from ..device import has_cuda
from . import trace as tr


@contextlib.contextmanager
def quiet_stderr() -> Iterator[None]:
    """Silence the C++ profiler's start/stop lines ("USDT: ... profiler_start"), which Kineto writes
    straight to file descriptor 2 and a notebook would show as a pink error block."""
    try:
        saved = os.dup(2)
    except OSError:            # no descriptor 2 (an embedded interpreter): nothing to silence
        yield
        return
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


# torch.profiler (2.11 on a GPU, in the recorded notebooks) warns as it starts that it "clears events
# at the end of each cycle". A capture here is one cycle whose events are all read at once, so the
# warning says nothing about it; in a notebook it is left on stderr as a pink block (03, 05, 07).
PROFILER_CYCLE_WARNING = r"(Warning: )?Profiler clears events at the end of each cycle"


@contextlib.contextmanager
def quiet_profiler_warnings() -> Iterator[None]:
    """Silence torch.profiler's "clears events at the end of each cycle" UserWarning, and only it."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=PROFILER_CYCLE_WARNING, category=UserWarning)
        yield


def _sync() -> None:
    if has_cuda():
        torch.cuda.synchronize()


@dataclass
class Profile:
    """One profiled run: its trace (Chrome JSON, as a dict), summary, and wall times."""
    trace: dict
    profiled_s: float
    unprofiled_s: float | None = None
    summary: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.summary:
            self.summary = tr.summarize(self.trace)
        s = self.summary
        s["profiled_wall_s"] = self.profiled_s
        s["unprofiled_wall_s"] = self.unprofiled_s
        s["profiler_overhead"] = (self.profiled_s / self.unprofiled_s - 1.0) if self.unprofiled_s else None
        s["idle_fraction_corrected"] = corrected_idle(s, self.unprofiled_s)


def corrected_idle(summary: dict, unprofiled_s: float | None) -> float | None:
    """Idle of the unprofiled run, assuming its kernels were busy as long as in the profiled one."""
    if not unprofiled_s or unprofiled_s <= 0:
        return None
    return max(0.0, 1.0 - summary["busy_us"] * 1e-6 / unprofiled_s)


def record_fields(summary: dict) -> dict:
    """The fields a record stores for a GPU-idle figure, named with its method; {} for a CPU run
    (there is no GPU to be idle: its CPU figures stay in the trace summaries)."""
    if summary.get("device") != "cuda":
        return {}
    return {"gpu_idle_fraction": summary["idle_fraction"], "gpu_idle_method": tr.GPU_IDLE_METHOD,
            "gpu_idle_between_steps": summary.get("idle_between_steps"),
            "gpu_idle_within_steps": summary.get("idle_within_steps"),
            "gpu_idle_fraction_corrected": summary.get("idle_fraction_corrected"),
            "profiler_overhead": summary.get("profiler_overhead"),
            "kernels_per_step": summary.get("kernels_per_step")}


def _config():
    """No Python event objects (the trace is all we read, and building them costs seconds on a GPU
    run); on a CPU, every thread's operators too (the CPU engine's worker thread is its "device"; on a
    GPU the host launches from one thread, and the kernels come from CUPTI)."""
    from torch._C._profiler import _ExperimentalConfig
    threads = {} if has_cuda() else {"profile_all_threads": True}
    for kwargs in ({**threads, "trace_only": True}, threads, {}):
        try:
            return _ExperimentalConfig(**kwargs)
        except TypeError:       # an older torch without these fields
            continue
    return None


def profile_run(run: Callable[[], Any], unprofiled_s: float | None = None) -> Profile:
    """Profile one call of `run` (which marks its own steps) inside the "window" range. The caller
    gives the unprofiled wall time of the same work when it has timed it."""
    from torch.profiler import ProfilerActivity, profile, record_function
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if has_cuda() else [])
    _sync()
    with quiet_profiler_warnings(), quiet_stderr(), profile(activities=acts, experimental_config=_config()) as prof:
        t0 = time.perf_counter()
        with record_function(tr.WINDOW):
            run()
            _sync()
        profiled = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        with quiet_profiler_warnings(), quiet_stderr():
            prof.export_chrome_trace(path)
        with open(path) as f:
            data = json.load(f)
    return Profile(data, profiled, unprofiled_s)


def profile_steps(step: Callable[[], Any], steps: int = 5, warmup: int = 2, repeat: int = 3) -> Profile:
    """Time `steps` calls of `step` unprofiled (best of `repeat`), then profile as many, each
    marked "step k"."""
    if steps < 1 or repeat < 1:
        raise ValueError(f"steps={steps}, repeat={repeat}; both must be >= 1")
    from torch.profiler import record_function
    for _ in range(warmup):
        step()
    _sync()
    unprofiled = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        _sync()
        unprofiled = min(unprofiled, time.perf_counter() - t0)

    def run() -> None:
        for k in range(steps):
            with record_function(f"step {k}"):
                step()
    return profile_run(run, unprofiled)
