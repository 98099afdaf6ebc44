"""The `course-kit bench TOPIC` suites: one file per topic, registered with `@bench.topic` and found
automatically by `topics()`, which this package owns (bench.py times; it never imports this layer). Each reads params["size"] and params["dtype"] (device.defaults), checks every variant,
then times them in one run.

Modules:

    aoti            `course-kit bench aoti`: the decode step through AOTInductor: compile, cold start, steady state.
    amp             `course-kit bench amp`: one training loop in every precision mode (notebook 02).
    async_blog      The async-batching blog's case, in one run: the course engine and HF continuous ...
    async_engine    `course-kit bench async`: the engine's sync and async modes across batch sizes and ...
    attention       `course-kit bench attention`: naive, tiled, Triton and every SDPA backend, checked ...
    attention_steps bench attention's forward steps (Triton, then Gluon), one change at a time (a helper)
    batching        `course-kit bench batching`: static vs dynamic vs continuous batching, and the HF peers.
    capstone        `course-kit bench capstone`: the course engine against HF transformers on one workload.
    compile         `course-kit bench compile`: torch.compile's modes on a batch-1 decode step and a ...
    cuda_graphs     `course-kit bench cuda_graphs`: launch overhead, the decode graph runner, ...
    engine          `course-kit bench engine`: a long mixed workload against its step trace's bandwidth limit,
                    with one profiled window of steps broken down (notebook 10, issue 44).
    dtypes          `course-kit bench dtypes`: matmul throughput by dtype (notebook 01's GPU section).
    fp8_train       `course-kit bench fp8_train`: TinyGPT trained in fp8 against bf16 autocast (notebook 02).
    lesson_traces   `course-kit bench traces`: the profiler traces that notebooks 03, 05, 07 and 10 show, ...
    model           `course-kit bench model`: one batch-1 decode step of the course model against HF's, ...
    parallel        `course-kit bench parallel`: collectives, tensor-parallel MLP and decode on 1, 2, 4, ...
    roofline        `course-kit bench roofline`: the measured ceilings of notebook 00.
    serving         `course-kit bench serving`: latency against load for the course server and HF's own ...
    speculative     `course-kit bench speculative`: speculative decoding at batch 1 on the course's trained pair.
    train_parallel  `course-kit bench train_parallel`: recomputation, accumulation; FSDP2 vs DDP on 2+ GPUs.
    streams         `course-kit bench streams`: the CUDA stream demonstrations of notebook 07, with ...
    woq             `course-kit bench woq`: weight-only int8 and int4 decode at batch 1 against bf16 ...
    woq_measure     bench woq's measurements: the step's products, torch's peers, the runners (a helper)
"""
from __future__ import annotations

import importlib
import pkgutil
import time
import traceback

from .. import bench, device

_IMPORT_ERRORS: dict[str, str] = {}


def topics() -> dict[str, bench.Topic]:
    """Every registered topic; importing each module of this package registers its topic."""
    for info in pkgutil.iter_modules(__path__):
        mod = f"{__name__}.{info.name}"
        try:
            importlib.import_module(mod)
        except Exception:  # noqa: BLE001 - one broken topic must not hide the others
            _IMPORT_ERRORS[mod] = traceback.format_exc(limit=3)
    return dict(sorted(bench._TOPICS.items()))


def import_errors() -> dict[str, str]:
    return dict(_IMPORT_ERRORS)


def run_topic(name: str, params: dict | None = None) -> dict:
    """Run one topic with the device's defaults (overridden by `params`) and return its record."""
    registry = topics()
    if name not in registry:
        raise ValueError(f"unknown topic {name!r}; choose one of: {', '.join(registry)} or all")
    d = device.defaults()
    # the one dtype rule is device.defaults(); a benchmark reads params["dtype"] (a torch.dtype)
    merged = {"size": d["size"], "device": d["device"], "dtype": d["dtype"], **(params or {})}
    merged["dtype"] = device.as_dtype(merged["dtype"])
    t0 = time.perf_counter()
    out = registry[name].run(merged)
    record = {"topic": name, "environment": bench.environment(), "params": {**merged, **out.get("params", {})},
              "results": out.get("results", []), "summary": out.get("summary", {}),
              "seconds": round(time.perf_counter() - t0, 2)}
    for key, value in out.items():
        record.setdefault(key, value)
    return bench.jsonable(record)
