"""Workloads for the engine: synthetic request mixes, Poisson arrivals, and recorded traces.

A trace is a JSON-lines file, one request per line:
    {"arrival": 0.12, "prompt_len": 230, "output_len": 57}
`arrival` is in seconds from the start. Prompts are filled with seeded random token ids, so a
trace describes the load without carrying any text.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..traces import trace_path


@dataclass
class TraceRequest:
    arrival: float
    prompt: list[int]
    max_new_tokens: int


def poisson_arrivals(n: int, rate: float, seed: int = 0) -> list[float]:
    """Arrival times (s) of `n` requests at `rate` requests per second on average."""
    if rate <= 0:
        raise ValueError(f"rate={rate} must be > 0 requests per second")
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, size=n)
    return np.cumsum(gaps).tolist()


def synthetic(n: int, prompt_len: tuple[int, int], output_len: tuple[int, int], vocab_size: int,
              seed: int = 0, arrivals: list[float] | None = None) -> list[TraceRequest]:
    """`n` requests with prompt and output lengths uniform in the given inclusive ranges."""
    for name, (lo, hi) in (("prompt_len", prompt_len), ("output_len", output_len)):
        if not 1 <= lo <= hi:
            raise ValueError(f"{name}=({lo}, {hi}) must satisfy 1 <= low <= high")
    rng = np.random.default_rng(seed)
    plens = rng.integers(prompt_len[0], prompt_len[1] + 1, size=n)
    olens = rng.integers(output_len[0], output_len[1] + 1, size=n)
    arrivals = arrivals if arrivals is not None else [0.0] * n
    if len(arrivals) != n:
        raise ValueError(f"{len(arrivals)} arrival times for {n} requests")
    # token ids avoid 0..2, which tokenizers use for special tokens (pad, bos, eos)
    return [TraceRequest(float(a), rng.integers(3, vocab_size, size=int(p)).tolist(), int(o))
            for a, p, o in zip(arrivals, plens, olens)]


def load(path: str | Path, vocab_size: int, seed: int = 0, limit: int | None = None,
         time_scale: float = 1.0) -> list[TraceRequest]:
    """Read a trace (a path, or a name in data/traces/) into requests with seeded prompts."""
    path = trace_path(path)
    rng = np.random.default_rng(seed)
    out = []
    for i, line in enumerate(path.read_text().splitlines()):
        if not line.strip():
            continue
        row = json.loads(line)
        out.append(TraceRequest(float(row["arrival"]) * time_scale,
                                rng.integers(3, vocab_size, size=int(row["prompt_len"])).tolist(),
                                int(row["output_len"])))
        if limit is not None and len(out) >= limit:
            break
    return sorted(out, key=lambda r: r.arrival)


def write(path: str | Path, arrivals: list[float], prompt_lens: list[int], output_lens: list[int]) -> None:
    """Write a trace file (used to make the small traces in data/traces/)."""
    with open(path, "w") as f:
        for a, p, o in zip(arrivals, prompt_lens, output_lens):
            f.write(json.dumps({"arrival": round(float(a), 4), "prompt_len": int(p), "output_len": int(o)}) + "\n")
