"""Notebook 05 (CUDA graphs): launch overhead, capture and replay, a decode step per batch size.

    runner          launch overhead, `capture`, and `DecodeGraphRunner`: one graph per batch
                    size over static buffers and a static KV cache (sections 1-4)
    pitfalls        what goes wrong in a capture (CPU sync, dynamic shapes, allocation, RNG),
                    each shown by running it in a process of its own (section "Pitfalls")
    buckets         which batch sizes to capture for a trace, and what padding costs (the
                    buckets widget)
    explain         where a decode step's time goes, worded from a `bench cuda_graphs` record
    trace_step      the kept trace's decode step beside the cuda_graphs record's: why their kernel
                    counts and step times differ, computed from the two records
    decode_kernels  the batch-1 step rewritten as Triton kernels (section "Fewer, wider
                    kernels"); tensor parallelism (notebook 09) runs them on its shards
    quantised       that step on int8 or int4 weights (`QuantisedDecodeStep`, DecodeGraphRunner's
                    weights=...), its quality against bf16, and where int4 runs (notebook 01 §7)

Widget `widgets/cuda_graphs.py`, figures `plots/cuda_graphs.py`, record `course-kit bench
cuda_graphs` (`benchmarks/cuda_graphs.py`), checks `grading/checks/nb05.py`.
"""
from __future__ import annotations

import importlib


def __getattr__(name: str):
    # `from course_kit import cuda_graphs as cg; cg.DecodeGraphRunner(...)` in a notebook saved
    # before the lessons moved into packages: the old module's names, read from `runner`.
    # (import_module, not `from . import`: that would ask this hook for the submodule again)
    try:
        return getattr(importlib.import_module(f"{__name__}.runner"), name)
    except AttributeError:
        raise AttributeError(f"module 'course_kit.cuda_graphs' has no attribute {name!r}") from None
