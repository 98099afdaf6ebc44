"""Putting host clocks and CUDA events on one timeline.

`EventRecorder.gpu(lane, name)` brackets work enqueued on a CUDA stream with two timing events;
`EventRecorder.cpu(lane, name)` brackets host work with `time.perf_counter`. Both are measured from
one origin: a synchronize, then a base event recorded on an idle GPU at the same moment as the
host clock is read, so GPU time `base.elapsed_time(e)` and host time `perf_counter() - host0`
share a zero (to within a launch latency, a few microseconds).

Without CUDA the recorder still times host spans, so host-only code can use it unchanged.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator

import torch

from .timeline import Timeline
from ..device import has_cuda


class EventRecorder:
    """Collects host and CUDA-stream spans on one clock; `finish()` returns the Timeline."""

    def __init__(self, enabled_gpu: bool | None = None) -> None:
        self.gpu_enabled = has_cuda() if enabled_gpu is None else enabled_gpu
        self.timeline = Timeline()
        self._pending: list[tuple[str, str, torch.cuda.Event, torch.cuda.Event]] = []
        if self.gpu_enabled:
            torch.cuda.synchronize()
            self._base = torch.cuda.Event(enable_timing=True)
            self._base.record()
        self.host0 = time.perf_counter()

    def now(self) -> float:
        """Host time in seconds since the origin."""
        return time.perf_counter() - self.host0

    @contextmanager
    def cpu(self, lane: str, name: str) -> Iterator[None]:
        t0 = self.now()
        try:
            yield
        finally:
            self.timeline.add(lane, name, t0, self.now())

    def mark_gpu(self, stream: "torch.cuda.Stream | None" = None) -> "torch.cuda.Event":
        """Record one timing event on `stream` (current stream by default) and return it."""
        ev = torch.cuda.Event(enable_timing=True)
        ev.record(stream if stream is not None else torch.cuda.current_stream())
        return ev

    def add_gpu(self, lane: str, name: str, start: "torch.cuda.Event",
                end: "torch.cuda.Event") -> None:
        """Register a span delimited by two already-recorded events (resolved in `finish`)."""
        self._pending.append((lane, name, start, end))

    @contextmanager
    def gpu(self, lane: str, name: str,
            stream: "torch.cuda.Stream | None" = None) -> Iterator[None]:
        """Bracket the work enqueued inside the block on `stream` (current stream by default)."""
        if not self.gpu_enabled:
            raise RuntimeError("EventRecorder.gpu needs CUDA; this recorder has no GPU "
                               "(use .cpu for host spans)")
        start = self.mark_gpu(stream)
        try:
            yield
        finally:
            self.add_gpu(lane, name, start, self.mark_gpu(stream))

    def finish(self) -> Timeline:
        """Wait for the GPU, convert pending event pairs to spans, and return the timeline."""
        if self.gpu_enabled and self._pending:
            torch.cuda.synchronize()
            for lane, name, e0, e1 in self._pending:
                t0 = self._base.elapsed_time(e0) / 1e3
                t1 = self._base.elapsed_time(e1) / 1e3
                self.timeline.add(lane, name, t0, max(t0, t1))
            self._pending.clear()
        return self.timeline
