"""Where a profiled window of engine steps went, by what the GPU ran (issue 44, notebook 10).

The window is cut into shares that add up to 1:
- one share per kind of kernel (`KINDS`: matrix products, attention of prefill chunks, paged decode
  attention, sampling, copies, other kernels such as Inductor's fused norms and activations);
- idle *within* steps: the gaps between a step's kernels (launch latency, which fusion and
  graphs remove);
- idle *between* steps: the GPU waiting for the host to prepare the next step (what the async
  loop removes), with the time before the first and after the last step.

Kernels may overlap (another stream): where several run at once, the time is split equally among
them, so the busy shares add up to the union of the intervals (`intervals.union`), never more.
"""
from __future__ import annotations

import re
from typing import Mapping

from . import intervals as iv
from . import trace as tr

# (kind, pattern on the kernel's name), first match wins: the engine's own Triton kernels, torch's
# and cuBLAS's products, and the operations its sampler launches
KINDS = (
    ("attention, paged decode", re.compile(r"_paged_decode_kernel|_merge_splits_kernel|decode_attention", re.I)),
    ("attention, prefill", re.compile(r"_paged_varlen_kernel|flash|fmha|attention|sdpa|cudnn", re.I)),
    ("matrix products", re.compile(r"gemm|gemv|nvjet|cutlass|cublas|xmma|matmul|_mm_|addmm|triton_tem", re.I)),
    ("sampling", re.compile(r"argmax|ArgMax|gumbel|exponential|multinomial|topk|sort|softmax|uniform|log_", re.I)),
    ("copies", re.compile(r"memcpy|memset|copy_kernel|Memcpy|Memset", re.I)),
)
OTHER = "other kernels"


def kind_of(name: str, activity_kind: str = "kernel") -> str:
    if activity_kind in ("memcpy", "memset"):
        return "copies"
    for kind, pattern in KINDS:
        if pattern.search(name):
            return kind
    return OTHER


def _split_time(items: list[tuple[float, float, str]]) -> dict[str, float]:
    """Time per kind: one sweep over every start and end; each stretch between two of them is
    shared equally by the activities running in it."""
    edges = sorted([(a, 1, k) for a, b, k in items] + [(b, -1, k) for a, b, k in items])
    out: dict[str, float] = {}
    running: dict[str, int] = {}
    count, last = 0, None
    for t, change, k in edges:
        if count and last is not None and t > last:
            for kind, n in running.items():
                out[kind] = out.get(kind, 0.0) + (t - last) * n / count
        running[k] = running.get(k, 0) + change
        if not running[k]:
            del running[k]
        count += change
        last = t
    return out


def breakdown(trace: Mapping | list) -> dict:
    """Shares of the profiled window (its "window" range, else first to last event), by kind of
    kernel, idle within steps and idle between steps; plus the window and each kind's time in µs."""
    evs = tr.events(trace)
    _, acts = tr.activities(evs)
    _, window = tr.annotations(evs)
    if window is None:
        spans = [tr._span(e) for e in evs]
        window = (min(s[0] for s in spans), max(s[1] for s in spans)) if spans else (0.0, 0.0)
    lo, hi = window
    if not hi > lo:
        raise ValueError(f"the trace's window {window} is empty: profile at least one step")
    busy = [(a.start_us, a.end_us) for a in acts]
    kinds_us = _split_time([(max(a.start_us, lo), min(a.end_us, hi), kind_of(a.name, a.kind)) for a in acts
                            if min(a.end_us, hi) > max(a.start_us, lo)])
    spans = tr.step_spans(acts)
    split = iv.split_idle(busy, list(spans.values()), window) if spans else \
        {"within_steps": 0.0, "between_steps": iv.idle_fraction(busy, window)}
    width = hi - lo
    shares = {k: v / width for k, v in sorted(kinds_us.items(), key=lambda kv: -kv[1])}
    shares["idle within steps (launch gaps)"] = split["within_steps"]
    shares["idle between steps (host)"] = split["between_steps"]
    return {"window_us": width, "steps": len(spans), "shares": shares,
            "kinds_us": kinds_us, "method": tr.GPU_IDLE_METHOD}
