"""What speculative decoding keeps of a draft, and what it is expected to buy.

The draft proposes k tokens d_1..d_k; the target scores the k + 1 positions in one pass.

- Greedy: keep the longest prefix of the draft that equals the target's own argmax at each
  position, then the target's argmax after it. The output is the target's greedy output, token
  for token.
- Sampling (Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding",
  algorithm 1; Chen et al. 2023): keep d_i with probability min(1, p_i(d_i) / q_i(d_i)), where p_i
  and q_i are the target's and the draft's distributions there; at the first rejection, draw from
  the residual max(0, p_i - q_i) (normalised); when all k are kept, draw one more from p_{k+1}.
  Every emitted token is then distributed exactly as the target alone would draw it.

Both rules take a leading batch dimension N (independent trials), so the tests can check the
distribution over many trials at once; the decoder calls them with N = 1. Static shapes, no host
sync: they run inside a CUDA graph. Draws use Gumbel-max on noise the caller passes in.

The expected gain (Leviathan et al. 2023, eq. 1 and theorem 3.8): with acceptance rate alpha per
position, a pass of the target yields (1 - alpha^(k+1)) / (1 - alpha) tokens on average; with a
draft step costing c target steps, the speed-up is that over (1 + k c).
"""
from __future__ import annotations

import torch

from ...models import sampling


def expected_tokens(alpha: float, k: int) -> float:
    """Tokens per target pass: 1 + alpha + ... + alpha^k = (1 - alpha^(k+1)) / (1 - alpha)."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    if alpha == 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def predicted_speedup(alpha: float, k: int, c: float) -> float:
    """Leviathan et al.'s expected walltime improvement: expected_tokens / (1 + k c)."""
    if c < 0:
        raise ValueError(f"the cost ratio c must be >= 0, got {c}")
    return expected_tokens(alpha, k) / (1.0 + k * c)


def predicted_speedup_from_costs(alpha: float, k: int, draft_ms: float, step_ms: float, verify_ms: float) -> float:
    """The same expectation with a round charged what it was measured to cost: k draft steps and one
    target pass over k + 1 tokens (`verify_ms`), against one target step (`step_ms`) per token alone.

    Leviathan et al. charge the verify pass one target step (memory-bound at batch 1: the pass reads
    the weights once however many tokens it carries); where it costs more, as on a model small enough
    to be launch- or compute-bound, this is the prediction that holds. With verify_ms = step_ms and
    draft_ms = c * step_ms it is `predicted_speedup(alpha, k, c)`."""
    if draft_ms < 0 or min(step_ms, verify_ms) <= 0:
        raise ValueError(f"step times must be > 0 ms (the draft's >= 0), got draft {draft_ms}, step {step_ms}, "
                         f"verify {verify_ms}")
    return expected_tokens(alpha, k) * step_ms / (k * draft_ms + verify_ms)


def best_k(alpha: float, c: float, ks=range(1, 9)) -> int:
    """The k of `ks` with the largest predicted speed-up."""
    return max(ks, key=lambda k: predicted_speedup(alpha, k, c))


def alpha_from_counts(accepted_prefix_counts, rounds: int) -> float:
    """The acceptance rate alpha that Leviathan et al.'s model assumes (every position kept
    independently with probability alpha), estimated from how often each position was reached and
    kept: kept at i / reached at i, pooled over positions (position i is reached when 0..i-1 were kept)."""
    counts = [float(c) for c in accepted_prefix_counts]
    reached = [float(rounds)] + counts[:-1]
    total = sum(reached)
    return sum(counts) / total if total else 0.0


def probabilities(logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """The distribution a token is drawn from: softmax of `sampling.warp` (temperature, top-k, top-p)."""
    return torch.softmax(sampling.warp(logits, temperature, top_k, top_p), dim=-1)


def gumbel_pick(weights: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """A draw from each row of non-negative `weights` (normalised or not) by Gumbel-max."""
    u = uniform.float().clamp(1e-10, 1.0 - 1e-7)
    return (torch.log(weights.float()) - torch.log(-torch.log(u))).argmax(dim=-1)


def accept_greedy(target_tokens: torch.Tensor, draft_tokens: torch.Tensor):
    """target_tokens [N, k+1] (the target's argmax after each of the k+1 inputs), draft_tokens [N, k].
    Returns (emitted [N, k+1], n_new [N], kept [N, k]): the first n_new of `emitted` are this round's
    output (the kept draft tokens, then the target's own token); kept[:, i] is 1 where d_1..d_{i+1}
    were all kept."""
    kept = torch.cumprod((target_tokens[:, :-1] == draft_tokens).long(), dim=1)
    # kept draft tokens equal the target's argmax there, so the output is the target's tokens
    return target_tokens, kept.sum(1) + 1, kept


def accept_sampled(p: torch.Tensor, q: torch.Tensor, draft_tokens: torch.Tensor, u_accept: torch.Tensor,
                   u_draw: torch.Tensor):
    """The rejection rule. p [N, k+1, V] target probabilities at the k+1 positions, q [N, k, V] the
    draft's at the first k, draft_tokens [N, k] drawn from q, u_accept [N, k] uniform, u_draw
    [N, k+1, V] uniform (for the residual draws). Returns (emitted [N, k+1], n_new [N], kept [N, k])."""
    N, k1, _ = p.shape
    k = k1 - 1
    d = draft_tokens[:, :, None]
    p_d = p[:, :k].gather(2, d)[:, :, 0]
    q_d = q.gather(2, d)[:, :, 0]
    # keep d_i with probability min(1, p/q): u < p/q, written without the division (q(d) > 0: d was drawn from q)
    kept = torch.cumprod((u_accept * q_d < p_d).long(), dim=1)
    j = kept.sum(1)                                                       # draft tokens kept
    residual = torch.cat(((p[:, :k] - q).clamp_min(0.0), p[:, k:]), dim=1)   # row k: p itself (no rejection)
    drawn = gumbel_pick(residual, u_draw)                                 # [N, k+1]
    fallback = drawn.gather(1, j[:, None])                                # the draw at the first rejection
    padded = torch.cat((draft_tokens, draft_tokens[:, :1]), dim=1)
    steps = torch.arange(k + 1, device=p.device)
    emitted = torch.where(steps[None, :] < j[:, None], padded, fallback)
    return emitted, j + 1, kept
