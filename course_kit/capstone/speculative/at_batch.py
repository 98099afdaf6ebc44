"""Why speculation pays less as the batch grows: the roofline of notebooks 00 and 05, applied to a round.

A forward pass over N tokens costs the largest of three things: reading the weights and the K/V it
attends to (bytes / bandwidth), doing about 2 x parameters FLOPs per token (FLOPs / peak), and a
floor of launches. At batch 1 the weights dominate: verifying k + 1 tokens costs what one token
costs, and the k draft steps are cheap. A batch of B sequences already amortises the weights over B
tokens; verifying B (k + 1) tokens multiplies the FLOPs by k + 1, and once B (k + 1) tokens pass
the ridge point (peak / bandwidth, in tokens) the verify pass costs about k + 1 plain steps: the
tokens the draft saves cost as much as computing them.

`speedup_at_batch` is Leviathan et al.'s expected tokens per round, times the target's step at
batch B, over the round's cost (k draft steps at batch B and one target pass over B (k + 1) tokens),
each from this model. Attention's FLOPs and the K/V's growth with the context are left out of the
FLOPs (small at these lengths); the K/V bytes are counted once per sequence and pass.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...models import llama
from . import rules


@dataclass(frozen=True)
class PassModel:
    """What one forward pass of a model reads and computes."""
    params: int
    bytes_per_param: float
    kv_bytes_per_token: int        # all layers, K and V
    floor_s: float = 0.0           # the launches' floor (a step's time when nothing else binds)

    @classmethod
    def of(cls, cfg: llama.ModelConfig, bytes_per_param: float = 2.0, floor_s: float = 0.0) -> "PassModel":
        kv = 2 * cfg.n_layers * cfg.n_kv_heads * cfg.head_dim * int(bytes_per_param)
        return cls(cfg.num_params(), bytes_per_param, kv, floor_s)


def pass_time(m: PassModel, batch: int, tokens_per_seq: int, context: int, gbs: float, tflops: float) -> float:
    """Seconds of one pass over `tokens_per_seq` new tokens of each of `batch` sequences."""
    if batch < 1 or tokens_per_seq < 1 or gbs <= 0 or tflops <= 0:
        raise ValueError(f"need batch, tokens_per_seq >= 1 and positive peaks, got {batch}, {tokens_per_seq}, "
                         f"{gbs}, {tflops}")
    read = (m.params * m.bytes_per_param + batch * context * m.kv_bytes_per_token) / (gbs * 1e9)
    compute = 2.0 * m.params * batch * tokens_per_seq / (tflops * 1e12)
    return max(m.floor_s, read, compute)


def speedup_at_batch(alpha: float, k: int, batch: int, target: PassModel, draft: PassModel, *, context: int,
                     gbs: float, tflops: float) -> dict:
    """The predicted speed-up of speculation (k draft tokens, acceptance alpha) at `batch`, with the
    times it rests on: the target's plain step, its verify pass over k + 1 tokens, a draft step."""
    step = pass_time(target, batch, 1, context, gbs, tflops)
    verify = pass_time(target, batch, k + 1, context, gbs, tflops)
    draft_step = pass_time(draft, batch, 1, context, gbs, tflops)
    round_s = k * draft_step + verify
    return {"batch": batch, "k": k, "alpha": alpha, "step_s": step, "verify_s": verify, "draft_s": draft_step,
            "verify_over_step": verify / step, "speedup": rules.expected_tokens(alpha, k) * step / round_s}


def ridge_tokens(bytes_per_param: float, gbs: float, tflops: float) -> float:
    """Tokens per pass at which 2 FLOPs per parameter per token take as long as reading the weights."""
    return tflops * 1e12 * bytes_per_param / (2.0 * gbs * 1e9)


def curve(alpha: float, k: int, batches, target: PassModel, draft: PassModel, *, context: int, gbs: float,
          tflops: float) -> list[dict]:
    return [speedup_at_batch(alpha, k, b, target, draft, context=context, gbs=gbs, tflops=tflops) for b in batches]


def break_even_batch(points: list[dict]) -> int | None:
    """The first batch of `points` (in order) at which speculation no longer pays (speed-up <= 1)."""
    for p in points:
        if p["speedup"] <= 1.0:
            return p["batch"]
    return None
