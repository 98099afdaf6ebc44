"""CUDA-graph buckets for a trace: which batch sizes to capture, and what padding costs (notebook 05).

A graph runner captures one graph per batch size (a *bucket*) and pads each step's batch up to the
next captured size; a batch above the largest bucket runs eagerly. For a trace of per-step batch
sizes this module computes:

- `batch_trace(arrivals_s, output_lens, max_batch, step_s)`: the decode batch size of every step when
  requests arriving at `arrivals_s` each hold one of `max_batch` slots for their output length (a
  simple slot simulation of a recorded trace; the engine of notebook 06 does the same with real work);
- `bucket_cost(batches, sizes, eager_ms, graph_ms)`: per step the bucket replayed and the padding
  rows, the padding waste over the whole trace, and the trace's time stepped eagerly against replayed
  from the buckets, from measured step times per batch size (a record's or this machine's).

Pure Python; the notebook's widget redraws from it as the bucket choice changes.
"""
from __future__ import annotations

import bisect
from typing import Mapping, Sequence


def batch_trace(arrivals_s: Sequence[float], output_lens: Sequence[int], max_batch: int,
                step_s: float) -> list[int]:
    """Batch size of each decode step: a request joins a free slot at the first step after it
    arrives (first come, first served) and leaves after `output_len` steps."""
    if max_batch < 1:
        raise ValueError(f"max_batch={max_batch}; it must be >= 1")
    if step_s <= 0:
        raise ValueError(f"step_s={step_s}; it must be > 0 (seconds per decode step)")
    if len(arrivals_s) != len(output_lens):
        raise ValueError(f"{len(arrivals_s)} arrivals but {len(output_lens)} output lengths")
    pending = sorted(zip(arrivals_s, output_lens))
    running: list[int] = []            # steps left per running request
    out: list[int] = []
    t, i = 0.0, 0
    while i < len(pending) or running:
        while i < len(pending) and pending[i][0] <= t and len(running) < max_batch:
            running.append(max(1, int(pending[i][1])))
            i += 1
        if running:
            out.append(len(running))
            running = [n - 1 for n in running if n > 1]
        t += step_s
    return out


def _interp(table: Mapping[int, float], b: int) -> float:
    """Step time at batch `b` from measured sizes: linear between them, linear beyond the last two."""
    xs = sorted(table)
    if not xs:
        raise ValueError("no measured step times")
    if b in table:
        return float(table[b])
    if len(xs) == 1:
        return float(table[xs[0]])
    if b < xs[0]:
        return float(table[xs[0]])
    j = min(max(bisect.bisect_left(xs, b), 1), len(xs) - 1)
    x0, x1 = xs[j - 1], xs[j]
    return float(table[x0] + (table[x1] - table[x0]) * (b - x0) / (x1 - x0))


def bucket_cost(batches: Sequence[int], sizes: Sequence[int], eager_ms: Mapping[int, float],
                graph_ms: Mapping[int, float]) -> dict:
    """The trace under a choice of buckets: padding waste and total time, eager against replay.

    `eager_ms[b]` and `graph_ms[b]`: measured ms per decode step at batch b (interpolated between the
    measured sizes). A step whose batch exceeds every bucket runs eagerly at its own size.
    """
    sizes = sorted({int(s) for s in sizes})
    if not sizes or sizes[0] < 1:
        raise ValueError(f"bucket sizes {list(sizes)} must be a non-empty list of integers >= 1")
    if any(b < 1 for b in batches):
        raise ValueError("every batch size in the trace must be >= 1")
    steps, real, padded, eager_total, replay_total, fallback = [], 0, 0, 0.0, 0.0, 0
    for b in batches:
        j = bisect.bisect_left(sizes, b)
        e = _interp(eager_ms, b)
        if j == len(sizes):                      # larger than every bucket: eager at its own size
            g, pad, t = None, 0, e
            fallback += 1
        else:
            g, pad, t = sizes[j], sizes[j] - b, _interp(graph_ms, sizes[j])
        steps.append({"batch": b, "graph": g, "padding": pad, "replay_ms": t, "eager_ms": e})
        real += b
        padded += pad
        eager_total += e
        replay_total += t
    n = len(batches)
    return {"sizes": sizes, "steps": steps, "real_rows": real, "padding_rows": padded,
            "padding_waste": padded / (real + padded) if real + padded else 0.0,
            "eager_ms": eager_total, "replay_ms": replay_total, "eager_fallback_steps": fallback,
            "eager_ms_per_step": eager_total / n if n else 0.0,
            "replay_ms_per_step": replay_total / n if n else 0.0}


def step_times(rows: Sequence[Mapping], variant: str, preset: str | None = None) -> dict[int, float]:
    """{batch: ms per step} of one variant from a record's (or this run's) decode rows."""
    return {int(r["batch"]): float(r["ms_per_step"]) for r in rows
            if r.get("variant") == variant and r.get("ms_per_step") and (preset is None or r.get("preset") == preset)}
