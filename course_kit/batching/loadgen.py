"""The arithmetic of a serving load test (notebook 06, `course-kit bench serving`): pure functions.

- `schedule`: open-loop Poisson arrivals at a rate, with prompt and output lengths drawn from a
  trace in data/traces/ (or the batching topic's synthetic ranges);
- `percentile` and `summarize_rate`: TTFT, TPOT and throughput of one rate, from the client's
  clock (TTFT counts from the *scheduled* send time, so a client that falls behind is charged);
- `crossing`: the request rate at which a latency first crosses a threshold, interpolated;
- `explain_knee`: the words for "what just happened", chosen from the numbers.

Nothing here talks to a server or a GPU (nor imports torch); `course_kit.batching.client` sends.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np

from ..narrate import ratio_words, speed
from ..traces import trace_path

# data/traces/ (as engine.trace has it; not imported from there so that load-client processes
# start without importing torch)


@dataclass(frozen=True)
class Planned:
    """One request of a load test: when to send it (s from the start) and its lengths."""
    send_at: float
    prompt_len: int
    output_len: int


def trace_lengths(name: str) -> list[tuple[int, int]]:
    """The (prompt_len, output_len) pairs of a trace in data/traces/ (a name or a path)."""
    rows = [json.loads(line) for line in trace_path(name).read_text().splitlines() if line.strip()]
    return [(int(r["prompt_len"]), int(r["output_len"])) for r in rows]


def schedule(n: int, rate: float, lengths: list[tuple[int, int]], seed: int = 0) -> list[Planned]:
    """`n` requests with Poisson arrivals at `rate` per second (rate = inf: all at t=0), their
    lengths drawn with replacement from `lengths` (seeded)."""
    if n < 1:
        raise ValueError(f"n={n} must be >= 1")
    if not rate > 0:
        raise ValueError(f"rate={rate} must be > 0 requests per second (inf for a burst)")
    if not lengths or any(p < 1 or o < 1 for p, o in lengths):
        raise ValueError("lengths must be a non-empty list of (prompt_len >= 1, output_len >= 1)")
    rng = np.random.default_rng(seed)
    sends = [0.0] * n if math.isinf(rate) else np.cumsum(rng.exponential(1.0 / rate, size=n)).tolist()
    picks = rng.integers(0, len(lengths), size=n)
    return [Planned(float(t), *lengths[int(i)]) for t, i in zip(sends, picks)]


def requests_for(rate: float, duration_s: float, lo: int, hi: int) -> int:
    """How many requests a run at `rate` gets: `duration_s` worth of arrivals, kept in [lo, hi]."""
    if not 1 <= lo <= hi:
        raise ValueError(f"need 1 <= lo <= hi, got lo={lo}, hi={hi}")
    return int(min(hi, max(lo, round(rate * duration_s))))


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100, linear interpolation as numpy), ignoring NaN; NaN if empty."""
    if not 0 <= q <= 100:
        raise ValueError(f"q={q} must be in [0, 100]")
    vals = [v for v in values if v is not None and v == v]
    return float(np.percentile(vals, q)) if vals else float("nan")


@dataclass
class ClientTiming:
    """One request as the client saw it; times in seconds from the run's start."""
    send_at: float
    expected: int                  # output tokens asked for
    tokens: int = 0                # output tokens received
    first: float | None = None     # first token's arrival
    last: float | None = None      # last token's arrival
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.tokens == self.expected

    @property
    def ttft(self) -> float:
        return float("nan") if self.first is None else self.first - self.send_at

    @property
    def tpot(self) -> float:
        if self.first is None or self.last is None or self.tokens < 2:
            return float("nan")
        return (self.last - self.first) / (self.tokens - 1)


def summarize_rate(timings: list[ClientTiming], rate: float) -> dict:
    """TTFT and TPOT percentiles, throughput and completion of one run at `rate` (req/s)."""
    done = [t for t in timings if t.last is not None]
    tokens = sum(t.tokens for t in timings)
    span = (max(t.last for t in done) - min(t.send_at for t in timings)) if done else float("nan")
    ttft = [t.ttft for t in timings if t.ok]
    tpot = [t.tpot for t in timings if t.ok]
    errors = [t.error for t in timings if t.error]
    return {
        "rate_rps": rate if math.isfinite(rate) else None,
        "requests": len(timings),
        "completed": sum(t.ok for t in timings),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "output_tokens": tokens,
        "duration_s": span,
        "throughput_tok_s": tokens / span if span and span > 0 else float("nan"),
        "completed_rps": sum(t.ok for t in timings) / span if span and span > 0 else float("nan"),
        "ttft_p50_s": percentile(ttft, 50), "ttft_p99_s": percentile(ttft, 99),
        "tpot_p50_s": percentile(tpot, 50), "tpot_p99_s": percentile(tpot, 99),
    }


def crossing(rates: list[float], values: list[float], threshold: float) -> float | None:
    """The rate where `values` (measured at increasing `rates`) first reaches `threshold`, linearly
    interpolated between the last point below it and the first at or above it. None if no point
    reaches it; the lowest rate if the first point already does (the sweep started too high)."""
    if len(rates) != len(values):
        raise ValueError(f"{len(rates)} rates for {len(values)} values")
    if any(b <= a for a, b in zip(rates, rates[1:])):
        raise ValueError(f"rates must increase: {rates}")
    prev = None
    for r, v in zip(rates, values):
        if v != v:                                   # no measurement at this rate
            continue
        if v >= threshold:
            if prev is None:
                return float(r)
            (r0, v0) = prev
            return float(r0 + (threshold - v0) * (r - r0) / (v - v0))
        prev = (r, v)
    return None


def explain_knee(knee_rps: float | None, top_rps: float, capacity_rps: float, threshold_s: float = 1.0) -> dict:
    """The words for the latency-vs-load figure, from its numbers.

    `knee_rps`: where p99 TTFT crossed `threshold_s` (None: it never did up to `top_rps`, the
    highest rate run); `capacity_rps`: the rate at which the server finishes requests when every
    one is queued at once (its served throughput / mean output length). Returns {"sentence",
    "cause", "fraction"} where fraction = knee / capacity."""
    if not capacity_rps > 0:
        raise ValueError(f"capacity_rps={capacity_rps} must be > 0")
    if knee_rps is None:
        frac = top_rps / capacity_rps
        return {"fraction": None, "cause": "not reached",
                "sentence": (f"p99 TTFT stayed under {threshold_s:g} s up to {top_rps:.3g} requests/s, "
                             f"{frac:.0%} of the rate the server completes requests at when saturated "
                             f"({capacity_rps:.3g}/s)" + (": the sweep never outran it." if frac < 1 else
                                                          ": the run was too short for the queue to grow "
                                                          "past it."))}
    frac = knee_rps / capacity_rps
    if frac >= 0.9:
        cause = "throughput"
        where = "close to" if frac <= 1.1 else "past"
        why = (f"{where} the rate it completes requests at when saturated: from there on, requests arrive faster "
               "than they finish, the queue grows without bound and time to first token grows with it")
    elif frac >= 0.5:
        cause = "bursts"
        why = ("below the rate it completes requests at when saturated: Poisson arrivals come in bursts, and "
               "a burst queues requests (and their prefills) before the mean rate reaches that ceiling")
    else:
        cause = "per-request latency"
        why = ("well below the rate it completes requests at when saturated: single requests already take "
               "long to start, so the queue is not what sets it")
    return {"fraction": frac, "cause": cause,
            "sentence": (f"p99 TTFT crosses {threshold_s:g} s at {knee_rps:.3g} requests/s, {frac:.0%} of "
                         f"{capacity_rps:.3g}/s, {why}.")}


def sweep_rows(record: dict) -> dict[str, list[dict]]:
    """The Poisson-rate rows of a serving record, per server, in increasing rate."""
    out: dict[str, list[dict]] = {}
    for r in record.get("results", []):
        if r.get("kind") == "poisson" and r.get("rate_rps") is not None:
            out.setdefault(r["server"], []).append(r)
    return {k: sorted(v, key=lambda r: r["rate_rps"]) for k, v in out.items()}


def describe(record: dict) -> str:
    """"What just happened" under notebook 06's latency-vs-load figure, from a serving record:
    each server's knee and what sets it, the serving layer's cost against the offline engine, and
    the course server against the peer (or why the peer did not run)."""
    summary, rows = record.get("summary", {}), sweep_rows(record)
    servers, th = summary.get("servers", {}), summary.get("threshold_s", 1.0)
    course, peer = servers.get("course", {}), servers.get("transformers serve", {})
    if "capacity_rps" not in course:
        return f"The course server's sweep did not run: {course.get('skipped', 'no results in this record')}."
    parts = ["**The course server.** " + explain_knee(course["knee_rps"], course["top_rate_rps"],
                                                      course["capacity_rps"], th)["sentence"]]
    ceiling, served = summary.get("offline_ceiling_tok_s"), course["saturated_tok_s"]
    if ceiling:
        share = served / ceiling
        if share < 0.9:
            cost = "the serving layer (HTTP, one JSON event per token, one event loop for every connection) costs the rest"
        elif share <= 1.1:
            cost = "the serving layer costs little here"
        else:
            cost = "more than offline, so the two runs differ by more than the serving layer costs (a noisy machine)"
        parts.append(f"Saturated, it served {served:,.0f} output tokens/s, {share:.0%} of the {ceiling:,.0f} "
                     f"tokens/s the same engine reaches offline on the same requests with no HTTP: {cost}.")
    if "capacity_rps" not in peer:
        parts.append(f"**The peer.** `transformers serve` did not run here: {peer.get('skipped', 'not in this record')}.")
        return "\n\n".join(parts)
    more = ratio_words(course["capacity_rps"] / peer["capacity_rps"], better="more", worse="fewer",
                       same="about as many as")
    parts.append(f"**The peer**, `transformers serve --continuous-batching` on the same weights, completes "
                 f"{peer['capacity_rps']:.3g} requests/s when saturated; the course server completes "
                 f"{course['capacity_rps']:.3g}, {more} the peer. " +
                 explain_knee(peer["knee_rps"], peer["top_rate_rps"], peer["capacity_rps"], th)["sentence"]
                 .replace("p99 TTFT", "Its p99 TTFT", 1))
    light = {name: rows[name][0].get("tpot_p50_s") for name in ("course", "transformers serve") if rows.get(name)}
    if all(isinstance(light.get(k), (int, float)) and light[k] > 0 for k in ("course", "transformers serve")):
        c, q = light["course"], light["transformers serve"]
        parts.append(f"Per token, at each server's lowest rate, the course server's p50 TPOT was {c * 1e3:.3g} ms and "
                     f"the peer's {q * 1e3:.3g} ms: the course server is {speed(c, q)} the peer.")
    if course["knee_rps"] is not None and peer["knee_rps"] is not None:
        amount = ratio_words(course["knee_rps"] / peer["knee_rps"], better="more load", worse="less load",
                             same="about the same load as")
        parts.append(f"At the {th:g} s line, the course server takes {amount} the peer before its slowest "
                     f"requests wait that long.")
    return "\n\n".join(parts)
