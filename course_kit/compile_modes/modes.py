"""torch.compile's modes, timed honestly: compile time (the first call) apart from steady state.

- "eager": no compilation, the peer every speed-up is measured against.
- "default": TorchDynamo captures graphs, Inductor fuses them into Triton (GPU) or C++ (CPU) kernels.
- "reduce-overhead": default + CUDA graphs, so a whole step is one launch (GPU only).
- "max-autotune": benchmarks several matmul/conv kernels per shape and keeps the fastest, + CUDA graphs.
- "max-autotune-no-cudagraphs": the autotuning without CUDA graphs.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import torch

from .. import bench

MODES = ("eager", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
# Modes whose point is a GPU feature: CUDA graphs, or autotuning Triton matmul templates.
GPU_MODES = ("reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise ValueError(f"unknown torch.compile mode {mode!r}; valid modes: {list(MODES)}")
    return mode


def compile_with_mode(fn: Callable, mode: str, **kwargs: Any) -> Callable:
    """`fn` itself for "eager", else `torch.compile(fn, mode=...)` (kwargs: dynamic, fullgraph...)."""
    check_mode(mode)
    if mode == "eager":
        return fn
    return torch.compile(fn, mode=None if mode == "default" else mode, **kwargs)


@contextlib.contextmanager
def fresh_caches(parent: str | None = None) -> Iterator[str]:
    """Point Inductor's and Triton's on-disk caches at a new empty folder, so compile times are
    cold-start times and nothing is cached outside the temporary folder. With `parent`, the folder is
    made inside it and left for the caller to remove (compile workers may still write there)."""
    keys = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")
    before = {k: os.environ.get(k) for k in keys}
    with contextlib.ExitStack() as stack:
        if parent is None:
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="course_kit_compile_"))
        else:
            tmp = tempfile.mkdtemp(prefix="mode_", dir=parent)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tmp
        os.environ["TRITON_CACHE_DIR"] = os.path.join(tmp, "triton")
        try:
            yield tmp
        finally:
            for k, v in before.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


@contextlib.contextmanager
def cache_at(folder: str) -> Iterator[str]:
    """Point Inductor's and Triton's on-disk caches at an existing `folder` (one that `fresh_caches`
    made), so that a later compile of the same graph finds it there: a warm compile."""
    keys = {"TORCHINDUCTOR_CACHE_DIR": folder, "TRITON_CACHE_DIR": os.path.join(folder, "triton")}
    before = {k: os.environ.get(k) for k in keys}
    os.environ.update(keys)
    try:
        yield folder
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@dataclass
class ModeResult:
    mode: str
    first_call_s: float | None = None      # compilation + first run (+ CUDA-graph recording)
    steady: bench.Timing | None = None      # after warm-up
    skipped: str | None = None
    extra: dict = field(default_factory=dict)

    @property
    def steady_s(self) -> float | None:
        return self.steady.median_s if self.steady else None

    @property
    def compile_s(self) -> float | None:
        """Time to first result beyond one steady-state call: what compiling cost."""
        if self.first_call_s is None or self.steady is None:
            return None
        return max(self.first_call_s - self.steady.median_s, 0.0)

    def as_dict(self) -> dict:
        row = {"mode": self.mode, "first_call_s": self.first_call_s, "compile_s": self.compile_s,
               "steady_s": self.steady_s, **self.extra}
        if self.steady is not None:
            row["spread"] = self.steady.spread
        if self.skipped:
            row["skipped"] = self.skipped
        return row


def _sync(device: str | torch.device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def measure_mode(fn: Callable, inputs: Sequence[tuple], mode: str, *, warmup: int = 3, repeat: int = 20,
                 device: str | torch.device = "cpu", reset: bool = True, static_inputs: bool = False,
                 **compile_kwargs: Any) -> ModeResult:
    """Compile `fn` in `mode`, time its first call on inputs[0], then time steady state with
    `bench.timeit` rotating through `inputs` (argument tuples).

    `static_inputs`: run on copies of the inputs marked with `torch._dynamo.mark_static_address`, so
    that a CUDA graph (reduce-overhead) reads them where they are instead of copying them into its own
    buffers before each replay (notebook 03 measures what that copy costs)."""
    check_mode(mode)
    if reset:
        torch._dynamo.reset()  # forget graphs compiled for other modes
    if static_inputs:
        inputs = [tuple(a.clone() if torch.is_tensor(a) else a for a in args) for args in inputs]
        for args in inputs:
            for a in args:
                if torch.is_tensor(a):
                    torch._dynamo.mark_static_address(a)
    f = compile_with_mode(fn, mode, **compile_kwargs)
    _sync(device)
    t0 = time.perf_counter()
    f(*inputs[0])
    _sync(device)
    first = time.perf_counter() - t0
    steady = bench.timeit(f, warmup=warmup, repeat=repeat, inputs=list(inputs), device=device)
    return ModeResult(mode, first, steady, extra={"static_inputs": True} if static_inputs else {})


def measure_modes(fn: Callable, inputs: Sequence[tuple], modes: Sequence[str] = MODES, *,
                  device: str | torch.device = "cpu", allow_cpu_gpu_modes: bool = False,
                  **kwargs: Any) -> dict[str, ModeResult]:
    """measure_mode for each mode; on a CPU the GPU modes are skipped with a reason. Adds
    "speedup_vs_eager" when eager was measured."""
    for m in modes:
        check_mode(m)
    out: dict[str, ModeResult] = {}
    for m in modes:
        if m in GPU_MODES and torch.device(device).type != "cuda" and not allow_cpu_gpu_modes:
            out[m] = ModeResult(m, skipped="needs a CUDA GPU (CUDA graphs / Triton autotuning)")
            continue
        out[m] = measure_mode(fn, inputs, m, device=device, **kwargs)
    eager = out.get("eager")
    if eager is not None and eager.steady_s:
        for r in out.values():
            if r.steady_s:
                r.extra["speedup_vs_eager"] = eager.steady_s / r.steady_s
    return out
