"""Honest timing: warm-up, CUDA events (or a synchronise before host clocks), medians, rotated inputs.

Also the registry of benchmark topics behind `course-kit bench TOPIC`: each file in
`course_kit/benchmarks/` registers one function with `@topic("name")`.
"""
from __future__ import annotations

import datetime
import itertools
import math
import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import torch

from . import _moved
from . import device as _device
from .device import default_device, has_cuda


# ---------------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------------
@dataclass
class Timing:
    times_s: list[float]

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s)

    def _quantile(self, q: float) -> float:
        ordered = sorted(self.times_s)
        return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]

    @property
    def p10_s(self) -> float:
        return self._quantile(0.10)

    @property
    def p90_s(self) -> float:
        return self._quantile(0.90)

    @property
    def spread(self) -> float:
        """(p90 - p10) / median: how noisy the measurement was."""
        return (self.p90_s - self.p10_s) / self.median_s if self.median_s > 0 else math.nan

    def as_dict(self) -> dict:
        return {"median_s": self.median_s, "p10_s": self.p10_s, "p90_s": self.p90_s,
                "repeats": len(self.times_s)}

    def __repr__(self) -> str:
        return f"Timing(median={self.median_s * 1e6:.1f} µs, p10-p90 spread={self.spread:.1%}, n={len(self.times_s)})"


def _is_cuda(dev: Any) -> bool:
    return dev is not None and torch.device(dev).type == "cuda"


def timeit(fn: Callable[..., Any], *, warmup: int = 3, repeat: int = 20,
           inputs: Sequence[tuple] | None = None, device: str | torch.device | None = None) -> Timing:
    """Time `fn` and return per-call times.

    - `warmup` calls run first (compilation, caches, allocator) and are not counted.
    - On CUDA each call sits between two CUDA events; elsewhere between host clocks.
    - `inputs`: argument tuples used in turn, so data larger than the L2 cache is not re-read hot.
    """
    if warmup < 0 or repeat < 1:
        raise ValueError(f"need warmup >= 0 and repeat >= 1, got warmup={warmup}, repeat={repeat}")
    if device is None:
        device = default_device()
    args_cycle = itertools.cycle(inputs) if inputs else itertools.repeat(())
    for _ in range(warmup):
        fn(*next(args_cycle))
    times: list[float] = []
    if _is_cuda(device):
        torch.cuda.synchronize()
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(repeat)]
        for start, end in events:
            args = next(args_cycle)
            start.record()
            fn(*args)
            end.record()
        torch.cuda.synchronize()
        times = [start.elapsed_time(end) / 1e3 for start, end in events]
    else:
        for _ in range(repeat):
            args = next(args_cycle)
            t0 = time.perf_counter()
            fn(*args)
            times.append(time.perf_counter() - t0)
    return Timing(times)


def unsynchronised_time(fn: Callable[[], Any], repeat: int = 10) -> float:
    """The wrong way, kept to show why: host clocks with no synchronise time the launch, not the work."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    if has_cuda():
        torch.cuda.synchronize()
    return statistics.median(times)


# ---------------------------------------------------------------------------------------------
# Out of memory becomes a skip
# ---------------------------------------------------------------------------------------------
@dataclass
class Skipped:
    reason: str

    def as_dict(self) -> dict:
        return {"status": "skipped", "reason": self.reason}


def _is_oom(err: BaseException) -> bool:
    oom_types = tuple(t for t in (getattr(torch, "OutOfMemoryError", None),
                                  getattr(torch.cuda, "OutOfMemoryError", None)) if t is not None)
    return isinstance(err, oom_types) or (isinstance(err, RuntimeError) and "out of memory" in str(err).lower())


def free_memory_bytes() -> int | None:
    if not has_cuda():
        return None
    free, _total = torch.cuda.mem_get_info()
    return free


def guard_oom(fn: Callable[[], Any], *, needs_bytes: int | None = None, what: str = "this case") -> Any:
    """Run fn(); if the GPU runs out of memory, free what we can and return `Skipped` naming the need."""
    free = free_memory_bytes()
    if needs_bytes is not None and free is not None and needs_bytes > free:
        return Skipped(f"{what} needs about {needs_bytes / 2**30:.1f} GiB of GPU memory; "
                       f"{free / 2**30:.1f} GiB is free")
    try:
        return fn()
    except Exception as err:  # noqa: BLE001 - only OOM is turned into a skip
        if not _is_oom(err):
            raise
        if has_cuda():
            torch.cuda.empty_cache()
        need = f"about {needs_bytes / 2**30:.1f} GiB" if needs_bytes else "more memory than is free"
        free = free_memory_bytes()
        have = f"; {free / 2**30:.1f} GiB is free" if free is not None else ""
        return Skipped(f"out of memory: {what} needs {need}{have}")


# ---------------------------------------------------------------------------------------------
# Environment stamp and progress
# ---------------------------------------------------------------------------------------------
def environment() -> dict:
    """What every record carries: GPU, capability, driver, library versions and the date."""
    desc = _device.describe()
    caps = _device.capabilities()
    return {
        "gpu": _device.gpu_name(),
        "gpu_count": torch.cuda.device_count() if has_cuda() else 0,
        "capability": caps.sm,
        "driver": desc.get("driver"),
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "triton": desc["triton"],
        "transformers": desc["transformers"],
        "python": desc["python"],
        "cpu": desc["cpu"],
        "cpu_cores": desc["cpu cores"],
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def progress(iterable: Iterable, desc: str | None = None, total: int | None = None, **kwargs: Any):
    """A progress bar that renders as a widget in notebooks and as text in a terminal."""
    from tqdm.auto import tqdm
    if os.environ.get("COURSE_KIT_STATIC_FIGURES"):   # an executed copy would keep a frozen "0%" bar,
        kwargs["disable"] = True                       # even where the caller asked for one
    return tqdm(iterable, desc=desc, total=total, **kwargs)


# ---------------------------------------------------------------------------------------------
# Topics
# ---------------------------------------------------------------------------------------------
@dataclass
class Topic:
    name: str
    run: Callable[[dict], dict]
    help: str = ""
    module: str = ""


_TOPICS: dict[str, Topic] = {}


def topic(name: str, help: str = "") -> Callable[[Callable[[dict], dict]], Callable[[dict], dict]]:
    """Register `run(params) -> {"params", "results", "summary"}` as `course-kit bench NAME`."""
    def register(fn: Callable[[dict], dict]) -> Callable[[dict], dict]:
        _TOPICS[name] = Topic(name, fn, help or (fn.__doc__ or "").strip().split("\n")[0], fn.__module__)
        return fn
    return register


# bench.run_topic and bench.topics, as notebooks saved before the move call them: they live in
# benchmarks/ now (bench times; it never imports the layer above it)
__getattr__ = _moved.forwarder(__name__)


def jsonable(obj: Any) -> Any:
    """A record made JSON-able: dtypes as names, tensors as lists, non-finite floats as None."""
    return _jsonable(obj)


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, torch.dtype):
        return str(obj).replace("torch.", "")
    if isinstance(obj, torch.Tensor):
        return obj.tolist()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if hasattr(obj, "as_dict"):
        return _jsonable(obj.as_dict())
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    return str(obj)


def format_table(rows: list[dict], columns: list[str] | None = None) -> str:
    """A plain-text table of result rows (for the CLI)."""
    if not rows:
        return "(no results)"
    columns = columns or list(dict.fromkeys(k for r in rows for k in r if not isinstance(r[k], (dict, list))))

    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.4g}"
        return "" if v is None else str(v)

    widths = {c: max(len(c), *(len(cell(r.get(c))) for r in rows)) for c in columns}
    lines = ["  ".join(c.ljust(widths[c]) for c in columns), "  ".join("-" * widths[c] for c in columns)]
    lines += ["  ".join(cell(r.get(c)).ljust(widths[c]) for c in columns) for r in rows]
    return "\n".join(lines)


@dataclass
class Case:
    """One measured variant in a topic's results: a name, its timing, and derived figures."""
    name: str
    timing: Timing | None = None
    figures: dict = field(default_factory=dict)
    skipped: str | None = None

    def as_dict(self) -> dict:
        row: dict = {"name": self.name, **self.figures}
        if self.timing is not None:
            row.update({"median_s": self.timing.median_s, "spread": self.timing.spread})
        if self.skipped:
            row["skipped"] = self.skipped
        return row
