"""Notebook 05: the decode step of the kept trace (`course-kit bench traces`) beside the step of the
`cuda_graphs` record, which count kernels and time the same call differently.

Both benches profile and time `DecodeGraphRunner.step` on the same model at batch 1 (copy the tokens
into the static buffers, decode, pick the next token). Their figures still differ, for reasons each
computed from the two records:

- **kernels**: the trace counts every kernel and copy of a step. The `cuda_graphs` records made
  before `compile_modes.kernels.KERNELS_COMPLETE` skipped every event whose name holds a `#` (meant for
  the profiler's own ranges, "## Call CompiledFxGraph ##"); the C++ names of PyTorch's lambda kernels
  hold one too (`elementwise_kernel<...>::{lambda(int)#1}`), so their counts left those out.
  `hash_free_per_step` counts, in the kept trace, what that filter kept. A record that says
  `kernels_complete` counts them all, and the two counts then agree;
- **time**: the trace's step is a span *under the profiler*, which slows the host that launches every
  kernel of an eager step; the unprofiled pass of the same bench gives the step's own time. Set beside
  the record's, the graph step (one launch) and the eager step (one launch per kernel) show whether
  the two runs differ on the GPU or on the host.
"""
from __future__ import annotations

from statistics import median
from typing import Mapping

from .. import narrate
from ..profiling import trace as tr
from ..profiling.explain import unprofiled_step_us

# The cuda_graphs bench's profile makes each call's inputs inside the profiled window (`_one`:
# torch.ones and torch.full, one fill kernel each), so its count holds two kernels the step has not.
RECORD_INPUT_KERNELS = 2
COUNTS_AGREE_WITHIN = 0.01    # two kernel counts within 1% are the same count


def hash_free_per_step(trace: Mapping) -> float | None:
    """Kernels and copies per step (median over the kept steps) whose names hold no `#`: what a
    profile that skips `#` names counts of this trace's steps. None when no step is marked."""
    _, acts = tr.activities(trace)
    per_step: dict[int, int] = {}
    for a in acts:
        if a.step is not None and a.kind != "cpu_op":
            per_step.setdefault(a.step, 0)
            per_step[a.step] += "#" not in a.name
    return median(per_step.values()) if per_step else None


def left_out_by_record(trace_eager: Mapping, record_count: float | None, kept_eager_trace: Mapping | None) -> float | None:
    """How many of the step's kernels and copies the record's profile left out, when its count is
    exactly what a `#`-skipping profile keeps of the kept trace (within 1%); None otherwise (the counts
    agree, or differ for a reason the two records do not show)."""
    if not record_count or not kept_eager_trace or not trace_eager.get("kernels_per_step"):
        return None
    whole = trace_eager["kernels_per_step"] + trace_eager.get("copies", 0) / max(trace_eager.get("steps") or 1, 1)
    hash_free = hash_free_per_step(kept_eager_trace)
    if hash_free is None or hash_free >= whole:
        return None
    if abs(hash_free + RECORD_INPUT_KERNELS - record_count) > COUNTS_AGREE_WITHIN * record_count:
        return None
    return whole - hash_free


def _per_step_wall_ms(row: Mapping) -> float | None:
    us = unprofiled_step_us(row)
    return us / 1e3 if us else None


def _kernels(trace_eager: Mapping, record_count: float | None, kept: Mapping | None,
             record_complete: bool = False) -> str:
    kernels = trace_eager["kernels_per_step"]
    copies = trace_eager.get("copies", 0) / max(trace_eager.get("steps") or 1, 1)
    whole = kernels + copies
    text = (f"**Kernels.** The trace counts every piece of GPU work in a step: {kernels:.0f} kernels and "
            f"{copies:.0f} copies, {whole:.0f} in all.")
    if record_count is None:
        return text + " The cuda_graphs record has no profile of the eager step to set beside it."
    text += f" The cuda_graphs record's profile of the same step counted {record_count:.0f} kernels and copies."
    if abs(whole + RECORD_INPUT_KERNELS - record_count) <= COUNTS_AGREE_WITHIN * record_count:
        return text + " The two counts agree (the record's includes the two fills that make its inputs)."
    left_out = None if record_complete else left_out_by_record(trace_eager, record_count, kept)
    if left_out is not None:
        hash_free = whole - left_out
        return text + (f" Of the trace's {whole:.0f}, {hash_free:.0f} have no `#` in their name; with the "
                       f"{RECORD_INPUT_KERNELS} fill kernels that make the record's inputs inside its profile, "
                       f"{hash_free + RECORD_INPUT_KERNELS:.0f}: the record's count. The profile that made the record "
                       "skipped every name holding a `#` (meant for the profiler's own ranges), and the names of "
                       f"PyTorch's lambda kernels hold one (`...{{lambda(int)#1}}`): it left out {left_out:.0f} of "
                       "the step's kernels and their time (fixed since; a new record counts them). The trace's "
                       "count is the step's.")
    # the record's count holds the two fills of its inputs, which are not the step's
    return text + (f" Less the {RECORD_INPUT_KERNELS} fills that make the record's inputs, the two differ by "
                   f"{abs(whole + RECORD_INPUT_KERNELS - record_count):.0f}, and neither record shows where the "
                   "difference lies.")


def _times(trace_eager: Mapping, trace_graph: Mapping | None, record_eager_ms: float | None,
           record_graph_ms: float | None) -> str:
    span_ms = trace_eager["step_us_median"] / 1e3
    text = f"**Time.** The trace's {span_ms:.2f} ms is an eager step's span under the profiler"
    if trace_eager.get("profiler_overhead") is not None:
        text += (f", whose own cost made the whole profiled pass {trace_eager['profiler_overhead']:.0%} "
                 "longer than the unprofiled one")
    eager_ms = _per_step_wall_ms(trace_eager)
    if eager_ms is None or not record_eager_ms:
        return text + "."
    text += (f". Unprofiled, the trace bench's eager step took {eager_ms:.2f} ms, the cuda_graphs record's "
             f"{record_eager_ms:.2f} ms: the trace bench's ran {narrate.speed(eager_ms, record_eager_ms)} the record's.")
    graph_ms = _per_step_wall_ms(trace_graph) if trace_graph else None
    if graph_ms is None or not record_graph_ms:
        return text
    text += (f" Its graph step ran {narrate.speed(graph_ms, record_graph_ms)} the record's ({graph_ms:.3f} ms "
             f"against {record_graph_ms:.3f} ms).")
    eager_same = narrate.agrees_with_record(eager_ms, record_eager_ms)
    graph_same = narrate.agrees_with_record(graph_ms, record_graph_ms)
    if graph_same and not eager_same:
        text += (" The graph step, launched once, agrees; the eager step, launched kernel by kernel from the "
                 "host, does not: the two runs differ in the host's time per launch, which neither record "
                 "explains.")
    elif not graph_same:
        text += " The graph steps differ too, so the two runs differ on the GPU's side as well."
    text += (f" Hence three leads of the graph over eager: {trace_eager['step_us_median'] / trace_graph['step_us_median']:.2f}x "
             f"from the profiled spans, {eager_ms / graph_ms:.2f}x unprofiled in the trace bench, and "
             f"{record_eager_ms / record_graph_ms:.2f}x in the cuda_graphs record.")
    return text


def explain_trace_step(trace_eager: Mapping, trace_graph: Mapping | None, record_summary: Mapping | None,
                       record_rows: list[dict] | None, kept_eager_trace: Mapping | None = None) -> str:
    """What the kept trace's step is, and why its kernel count and time differ from the cuda_graphs
    record's step: the trace rows (`traces.json`, lesson 05), the record's summary and rows, and the
    kept eager trace (to count what a `#`-skipping profile keeps)."""
    if not trace_eager.get("kernels_per_step") or not trace_eager.get("step_us_median"):
        raise ValueError(f"trace row {trace_eager.get('name')!r} has no kernels or step span per step")
    preset = ((record_summary or {}).get("decode_bytes") or {}).get("preset")
    rows = [r for r in record_rows or [] if r.get("batch") == 1 and (preset is None or r.get("preset") == preset)]
    ms = {r.get("variant"): r.get("ms_per_step") for r in rows}
    profile = (record_summary or {}).get("profile_eager_b1") or {}
    count, complete = profile.get("kernels_per_step"), bool(profile.get("kernels_complete"))
    head = (f"**What the trace's step is.** The trace ({trace_eager.get('what', 'the eager decode step')}) and the "
            "cuda_graphs record profile and time the same call, `DecodeGraphRunner.step` at batch 1: copy the "
            "tokens into the static buffers, decode one token, pick the next one.")
    return "\n\n".join([head, _kernels(trace_eager, count, kept_eager_trace, complete),
                        _times(trace_eager, trace_graph, ms.get("eager"), ms.get("graph"))])
