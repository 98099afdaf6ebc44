"""Naive attention: materialise the full S x S score matrix, softmax it, multiply by V.

This is the textbook formula softmax(Q K^T / sqrt(d)) V written the obvious way. It is correct
and simple, but it writes two [B, H, S_q, S_k] tensors (scores and probabilities) to memory, so
its memory grows with the square of the sequence length. `peak_memory` measures exactly that.
"""
from __future__ import annotations

import contextlib
import math
import os
import sys
from typing import Callable, Iterator

import torch


def _check_shapes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"q, k, v must be [B, H, S, D]; got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape; got {tuple(k.shape)} and {tuple(v.shape)}")
    if q.shape[0] != k.shape[0] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share batch and head dim; got {tuple(q.shape)} and {tuple(k.shape)}")
    if q.shape[1] % k.shape[1] != 0:
        raise ValueError(f"query heads ({q.shape[1]}) must be a multiple of key/value heads ({k.shape[1]})")


def expand_kv(k: torch.Tensor, n_q_heads: int) -> torch.Tensor:
    """Grouped-query attention: repeat each K/V head for the query heads that share it."""
    group = n_q_heads // k.shape[1]
    return k if group == 1 else k.repeat_interleave(group, dim=1)


def causal_mask(s_q: int, s_k: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """True where query i may attend to key j (j <= i), top-left aligned like SDPA's is_causal."""
    return torch.ones(s_q, s_k, dtype=torch.bool, device=device).tril()


def naive_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                    scale: float | None = None) -> torch.Tensor:
    """softmax(Q K^T * scale) V with the whole score matrix in memory. q: [B, Hq, Sq, D], k/v: [B, Hkv, Sk, D]."""
    _check_shapes(q, k, v)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    k, v = expand_kv(k, q.shape[1]), expand_kv(v, q.shape[1])
    scores = (q @ k.transpose(-2, -1)) * scale                       # [B, H, Sq, Sk]: the S^2 tensor
    if causal:
        scores = scores.masked_fill(~causal_mask(q.shape[2], k.shape[2], q.device), float("-inf"))
    # softmax in at least float32 (half-precision exp/sum loses too much); a second S^2 tensor
    probs = torch.softmax(scores.float() if scores.element_size() < 4 else scores, dim=-1).to(q.dtype)
    return probs @ v


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                        scale: float | None = None) -> torch.Tensor:
    """The float64 CPU oracle every other variant is checked against."""
    return naive_attention(q.detach().double().cpu(), k.detach().double().cpu(), v.detach().double().cpu(),
                           causal=causal, scale=scale)


def reference_lse(q: torch.Tensor, k: torch.Tensor, *, causal: bool = False, scale: float | None = None) -> torch.Tensor:
    """The float64 CPU log-sum-exp of each query's scaled scores (natural log), the oracle for the
    LSE a flash forward stores for its backward. GQA: K heads are repeated to Q's."""
    q, k = q.detach().double().cpu(), k.detach().double().cpu()
    s = q @ k.repeat_interleave(q.shape[1] // k.shape[1], 1).transpose(-1, -2)
    s = s * (q.shape[-1] ** -0.5 if scale is None else scale)
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).tril(), float("-inf"))
    return torch.logsumexp(s, -1)


def attention_flops(batch: int, heads: int, s_q: int, s_k: int, head_dim: int, *, causal: bool) -> float:
    """Forward FLOPs of the two matmuls (QK^T and PV), 2 FLOPs per multiply-add; causal counts half."""
    flops = 4.0 * batch * heads * s_q * s_k * head_dim
    return flops / 2 if causal else flops


@contextlib.contextmanager
def _quiet_native_output() -> Iterator[None]:
    """Silence what the profiler's C++ side prints to file descriptors 1 and 2 (start/stop lines)."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved = [os.dup(1), os.dup(2)]
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, devnull):
            os.close(fd)


def peak_memory(fn: Callable[[], object], device: torch.device | str = "cpu") -> int:
    """Peak bytes allocated while `fn()` runs, above what was allocated before it.

    On CUDA this reads the caching allocator's peak counter. On CPU there is no such counter, so
    the PyTorch profiler records every allocation and free, and we replay them in time order.
    """
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        out = fn()
        torch.cuda.synchronize(device)
        peak = torch.cuda.max_memory_allocated(device) - base
        del out
        return int(peak)
    from torch.profiler import ProfilerActivity, profile
    with _quiet_native_output(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = fn()
    del out
    # Each op's self memory (its allocations minus its frees, children excluded) is counted when the
    # op ends: a composite op frees its temporaries after its children allocated them, so counting
    # at the end keeps the children's allocations in the peak.
    events = sorted(prof.events(), key=lambda e: e.time_range.end)
    current = peak = 0
    for event in events:
        current += event.self_cpu_memory_usage
        peak = max(peak, current)
    return int(peak)
