"""One live run of the engine for notebook 06's widget: policy, slots, chunk size and arrival rate.

Uses only the engine's public API (`Engine`, `SamplingParams`, `trace`, `metrics`): a seeded
synthetic workload arriving as a Poisson process at `rate` requests per second, replayed in real
time by `Engine.generate(arrivals=...)`, then the slot intervals for the Gantt chart and each
request's TTFT (first token minus arrival) and TPOT (time per output token after the first).

`run_live(..., on_progress=f)` runs the engine in a worker thread and calls `f(fraction)` from the
caller's thread while it runs, so a widget's progress bar moves during the run.
"""
from __future__ import annotations

import threading
import time
from typing import Callable

from ..engine import Engine, SamplingParams, metrics, trace
from ..engine.metrics import RequestOutput

POLICIES = ("static", "dynamic", "continuous")


def workload(n: int, rate: float, vocab_size: int, prompt_len: tuple[int, int] = (4, 48),
             output_len: tuple[int, int] = (4, 24), seed: int = 0) -> tuple[list, list, list[float]]:
    """(prompts, sampling params, arrival times in s) of `n` seeded requests at `rate` per second."""
    if not 1 <= n <= 512:
        raise ValueError(f"n={n}; it must be in [1, 512] requests")
    arrivals = trace.poisson_arrivals(n, rate, seed=seed)
    arrivals = [a - arrivals[0] for a in arrivals]           # the first request arrives at t = 0
    reqs = trace.synthetic(n, prompt_len, output_len, vocab_size, seed=seed, arrivals=arrivals)
    return ([r.prompt for r in reqs], [SamplingParams(max_new_tokens=r.max_new_tokens, ignore_eos=True) for r in reqs],
            arrivals)


def request_latencies(outputs: list[RequestOutput]) -> list[dict]:
    """Per request: arrival, TTFT (first token - arrival) and TPOT (mean time per token after the first)."""
    return [{"request": o.request_id, "arrival": o.arrival, "ttft_s": o.ttft, "tpot_s": o.tpot,
             "tokens": len(o.tokens)} for o in outputs]


def run_live(model, policy: str = "continuous", slots: int = 4, chunk: int = 64, rate: float = 20.0,
             n_requests: int = 12, seed: int = 0, prompt_len: tuple[int, int] = (4, 48),
             output_len: tuple[int, int] = (4, 24),
             on_progress: Callable[[float], None] | None = None) -> dict:
    """Run the workload once; return its slot intervals, per-request latencies and the engine summary."""
    if policy not in POLICIES:
        raise ValueError(f"policy {policy!r}; choose one of {POLICIES}")
    if not 1 <= slots <= 256:
        raise ValueError(f"slots={slots}; it must be in [1, 256]")
    if chunk < 1:
        raise ValueError(f"chunk={chunk}; the prefill chunk (token budget per step) must be >= 1")
    if not 0 < rate <= 10_000:
        raise ValueError(f"rate={rate}; it must be in (0, 10000] requests per second")
    prompts, params, arrivals = workload(n_requests, rate, model.config.vocab_size, prompt_len, output_len, seed)
    eng = Engine(model, policy=policy, max_num_seqs=slots, max_num_batched_tokens=max(chunk, 1),
                 block_size=16, max_wait_s=0.05)
    total = sum(p.max_new_tokens for p in params)
    box: dict = {}

    def work() -> None:
        try:
            box["outputs"] = eng.generate(prompts, params, arrivals=arrivals)
        except BaseException as err:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = err
    t0 = time.perf_counter()
    worker = threading.Thread(target=work, name="live-engine", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.1)
        if on_progress is not None:
            # one token per decode row; prefill rows that finish a prompt add one more (counted at the end)
            done = sum(1 for st in list(eng.steps) for _, _, phase in st.rows if phase == "decode")
            on_progress(min(done / max(total, 1), 0.99))
    if "error" in box:
        raise box["error"]
    if on_progress is not None:
        on_progress(1.0)
    outs = box["outputs"]
    return {"policy": policy, "slots": slots, "chunk": chunk, "rate": rate, "n_requests": n_requests,
            "intervals": metrics.slot_intervals(eng.steps), "latencies": request_latencies(outs),
            "summary": eng.summary(outs), "wall_s": time.perf_counter() - t0,
            "tokens": [o.tokens for o in outs]}
