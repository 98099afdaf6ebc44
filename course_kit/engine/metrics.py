"""What a serving run measured: per-request timings and per-step batch composition, summarised.

- TTFT (time to first token): first token time - arrival.
- TPOT (time per output token): (finish - first token) / (output tokens - 1), per request.
- latency: finish - arrival.
- throughput: output tokens / (last finish - first arrival).
- padding waste: the share of computed tokens that were padding.
- slot occupancy: the share of batch slots holding a live request, averaged over step time.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import narrate


@dataclass
class StepRecord:
    start: float
    end: float
    rows: list[tuple[int, str, str]]       # (slot, request id, "prefill" | "decode") per live row
    num_tokens: int                        # real new tokens fed to the model (padding excluded)
    padding_tokens: int
    used_blocks: int
    num_waiting: int
    num_preempted: int = 0
    kv_tokens: int = 0                     # K/V positions the step's attention read (SchedulerOutput)


@dataclass
class RequestOutput:
    request_id: str
    prompt: list[int]
    tokens: list[int]
    arrival: float
    first_token: float | None
    finish: float | None
    finish_reason: str | None
    token_times: list[float] = field(default_factory=list)
    num_preemptions: int = 0

    @property
    def ttft(self) -> float:
        return float("nan") if self.first_token is None else self.first_token - self.arrival

    @property
    def latency(self) -> float:
        return float("nan") if self.finish is None else self.finish - self.arrival

    @property
    def tpot(self) -> float:
        if self.finish is None or self.first_token is None or len(self.tokens) < 2:
            return float("nan")
        return (self.finish - self.first_token) / (len(self.tokens) - 1)


def _pct(values: list[float], q: float) -> float:
    vals = [v for v in values if v == v]
    return float(np.percentile(vals, q)) if vals else float("nan")


def summarize(outputs: list[RequestOutput], steps: list[StepRecord], max_num_seqs: int) -> dict:
    """The headline numbers of one run, as a JSON-able dict (times in seconds)."""
    done = [o for o in outputs if o.finish is not None]
    out_tokens = sum(len(o.tokens) for o in outputs)
    prompt_tokens = sum(len(o.prompt) for o in outputs)
    if done:
        duration = max(o.finish for o in done) - min(o.arrival for o in outputs)
    else:
        duration = float("nan")
    ttft = [o.ttft for o in outputs]
    tpot = [o.tpot for o in outputs]
    lat = [o.latency for o in outputs]
    computed = sum(s.num_tokens for s in steps)
    padding = sum(s.padding_tokens for s in steps)
    step_time = sum(s.end - s.start for s in steps)
    occupancy = (sum(len(s.rows) * (s.end - s.start) for s in steps) / (max_num_seqs * step_time)
                 if step_time > 0 else float("nan"))
    # steps that carry a prefill chunk (continuous batching mixes them with decodes)
    prefill = [s for s in steps if any(phase == "prefill" for _, _, phase in s.rows)]
    prefill_time = sum(s.end - s.start for s in prefill)
    return {
        "requests": len(outputs),
        "output_tokens": out_tokens,
        "prompt_tokens": prompt_tokens,
        "duration_s": duration,
        "throughput_tok_s": out_tokens / duration if duration and duration > 0 else float("nan"),
        "total_tok_s": (out_tokens + prompt_tokens) / duration if duration and duration > 0 else float("nan"),
        "ttft_mean_s": float(np.nanmean(ttft)) if ttft else float("nan"),
        "ttft_p50_s": _pct(ttft, 50), "ttft_p99_s": _pct(ttft, 99),
        "tpot_mean_s": float(np.nanmean(tpot)) if any(t == t for t in tpot) else float("nan"),
        "tpot_p50_s": _pct(tpot, 50), "tpot_p99_s": _pct(tpot, 99),
        "latency_p50_s": _pct(lat, 50), "latency_p99_s": _pct(lat, 99),
        "padding_waste": padding / (computed + padding) if computed + padding else 0.0,
        "slot_occupancy": occupancy,
        "steps": len(steps),
        "prefill_steps": len(prefill),
        "prefill_step_time_share": prefill_time / step_time if step_time > 0 else float("nan"),
        "preemptions": sum(o.num_preemptions for o in outputs),
    }


def slot_intervals(steps: list[StepRecord]) -> list[dict]:
    """Merge per-step rows into intervals (request, slot, phase, start, end) for a Gantt chart."""
    open_: dict[tuple[str, int], dict] = {}
    done: list[dict] = []
    for st in steps:
        seen = set()
        for slot, rid, phase in st.rows:
            key = (rid, slot)
            seen.add(key)
            cur = open_.get(key)
            if cur is not None and cur["phase"] == phase:
                cur["end"] = st.end
                continue
            if cur is not None:
                done.append(cur)
            open_[key] = {"request": rid, "slot": slot, "phase": phase, "start": st.start, "end": st.end}
        for key in [k for k in open_ if k not in seen]:
            done.append(open_.pop(key))
    done.extend(open_.values())
    return sorted(done, key=lambda d: (d["start"], d["slot"]))


def block_usage(steps: list[StepRecord], num_blocks: int) -> dict:
    """KV-block usage over time: times (step ends) and the fraction of blocks in use."""
    return {"t": [s.end for s in steps], "used": [s.used_blocks / num_blocks for s in steps],
            "waiting": [s.num_waiting for s in steps]}


def policy_gain(static: dict, continuous: dict) -> dict:
    """Continuous over static batching, split in two (from two `summarize` results of the same
    requests): how many fewer model steps it needs for the same tokens (padding and waiting
    removed), and how much more each of its steps costs (fuller batches read more context, and
    prefill chunks ride along). Throughput ratio = fewer_steps / step_cost_ratio."""
    fewer = static["steps"] / continuous["steps"]
    cost = (continuous["duration_s"] / continuous["steps"]) / (static["duration_s"] / static["steps"])
    return {"fewer_steps": fewer, "step_cost_ratio": cost, "throughput_ratio": fewer / cost}


def explain_step_cost(gains: dict[str, dict]) -> str:
    """Notebook 06: what each continuous step costs against a static one, per loop mode
    (`policy_gain` results keyed "sync" / "async"), and whether the async loop hid the host's extra
    work. A fuller batch gives the host more to schedule and update each step: in the sync loop that
    adds to the step; in the async loop it overlaps the GPU's previous step. Which one the run shows
    is read from the two ratios, never assumed."""
    base = ("The fewer steps are the scheduling gain. The step cost is what a fuller batch really does: more live "
            "requests per step for the host to schedule, lay out and update (a static batch's finished members "
            "ride along as padding rows that the host barely touches), and new requests' prefill chunks riding "
            "along with the decodes.")
    if not {"sync", "async"} <= set(gains):
        return base
    s, a = gains["sync"]["step_cost_ratio"], gains["async"]["step_cost_ratio"]
    if a < s * (1 - narrate.SAME_WITHIN):
        return base + (f" The async loop's step cost is lower ({a:.2f}x against {s:.2f}x in sync): the host's extra "
                       f"work per step ran while the GPU computed the previous step, so less of it showed.")
    if a > s * (1 + narrate.SAME_WITHIN):
        return base + (f" The async loop's step cost is higher ({a:.2f}x against {s:.2f}x in sync): overlapping "
                       f"the host did not hide the fuller batch's cost here.")
    return base + (f" The step cost is about the same in both loops ({s:.2f}x sync, {a:.2f}x async): the fuller "
                   f"batch's extra host work did not show in the step time here, so hiding it behind the GPU "
                   f"changed nothing measurable.")


def bandwidth_limit(steps: list[StepRecord], weight_bytes: float, kv_bytes_per_token: float,
                    copy_bytes_per_s: float, flops_per_token: float = 0.0, peak_flops: float = float("inf"),
                    output_tokens: int | None = None) -> dict:
    """The fastest a run's own step trace could have gone on this GPU (issue 44's limit).

    Every step reads the weights once and the K/V of every position its rows attend
    (`StepRecord.kv_tokens`); at the measured copy bandwidth that takes bytes / bandwidth. A step's
    new tokens also cost 2 x parameters FLOPs each (`flops_per_token`), at best at `peak_flops`;
    the step can go no faster than the slower of the two. Summed over the run's steps, the time
    bound gives output tokens per second at the limit."""
    if copy_bytes_per_s <= 0 or weight_bytes < 0 or kv_bytes_per_token < 0:
        raise ValueError(f"copy_bytes_per_s={copy_bytes_per_s} must be > 0, the byte counts >= 0")
    bytes_read = [weight_bytes + kv_bytes_per_token * s.kv_tokens for s in steps]
    memory_s = [b / copy_bytes_per_s for b in bytes_read]
    compute_s = [flops_per_token * s.num_tokens / peak_flops for s in steps]
    bound_s = sum(max(m, c) for m, c in zip(memory_s, compute_s))
    tokens = output_tokens if output_tokens is not None else sum(
        sum(1 for _, _, phase in s.rows if phase == "decode") for s in steps)
    return {"steps": len(steps), "bytes_read": sum(bytes_read), "memory_bound_s": sum(memory_s),
            "compute_bound_s": sum(compute_s), "bound_s": bound_s,
            "compute_bound_steps": sum(1 for m, c in zip(memory_s, compute_s) if c > m),
            "limit_tok_s": tokens / bound_s if bound_s > 0 else float("inf"), "output_tokens": tokens}
