"""Speculative decoding at batch 1: a draft proposes k tokens, the target verifies them in one pass.

One round, for the sequence whose last token x sits at position P (its K/V not yet in either cache):

1. the draft runs k steps: first the two tokens at P-1 and P (the one at P-1 is there again
   because when every draft token was kept last round, the draft never saw the last of them), then
   its own proposals d_1..d_{k-1}; it proposes d_1..d_k;
2. the target runs ONE pass over the k + 1 tokens x, d_1..d_k at positions P..P+k (`steps.py`);
3. `rules.accept_greedy` or `rules.accept_sampled` keeps j draft tokens and adds one of the
   target's own: j + 1 new tokens (1 to k + 1);
4. rollback: the sequence's length moves to P + j + 2, its last token (the target's own) at
   P + j + 1 with no K/V yet; K/V the models wrote from there on stay in the caches but are dead: attention reads only up to each token's position, and the
   next round writes positions from the new P - 1 on, over all of them, before any is read.
   `scrub=True` zeroes them as well (the tests then compare whole caches with a plain run's).

All of it is device tensors of fixed shape, without a host sync: the sequence, its length and the
positions live on the device, so one CUDA graph replays a whole round (`use_graphs`). The host
reads the length only to decide how many more rounds to launch. Sampling draws its noise outside
the graph from a seeded generator before each round, as notebook 05's runner does.

k = 0 is the target alone through the same machinery (a round is one decode step).
"""
from __future__ import annotations

import math

import torch

from ...models import llama, sampling
from . import rules
from .steps import rows_step


def accept_greedy_fused(*args, **kwargs):
    from ...cuda_graphs.decode_kernels.accept import accept_greedy_fused as fused   # Triton only where used
    return fused(*args, **kwargs)


class SpeculativeDecoder:
    """Greedy or sampled decoding of one sequence with a draft of k tokens a round.

    kernels: "torch" (the models' own layers) or "triton" (notebook 05's Triton step, at most 8
    tokens a pass: k <= 7), or a (draft, verify) pair of them. accept: "auto" fuses the greedy
    acceptance into one Triton kernel on the Triton verify step; "torch" keeps PyTorch's ops.
    use_graphs: capture the round in one CUDA graph (default: on a GPU). scrub: zero rejected K/V.
    """

    def __init__(self, target: llama.Transformer, draft: llama.Transformer | None, k: int, *, max_seq: int = 512,
                 temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int = 0,
                 kernels: str | tuple[str, str] = "torch", use_graphs: bool | None = None, pdl: bool | None = None,
                 scrub: bool = False, accept: str = "auto"):
        weight = target.tok_embeddings.weight
        self.device, self.dtype = weight.device, weight.dtype
        if not 0 <= k <= 16:
            raise ValueError(f"k must be in [0, 16] draft tokens a round, got {k}")
        if k > 0 and draft is None:
            raise ValueError("k > 0 needs a draft model")
        if draft is not None and draft.config.vocab_size != target.config.vocab_size:
            raise ValueError(f"the draft's vocabulary ({draft.config.vocab_size}) differs from the target's "
                             f"({target.config.vocab_size}): they must share a tokenizer")
        if draft is not None and draft.tok_embeddings.weight.device != self.device:
            raise ValueError("the draft and the target must be on the same device")
        sampling.filter_logits(torch.zeros(1, target.config.vocab_size), top_k, top_p)   # validates
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {temperature}")
        draft_kernels, verify_kernels = (kernels, kernels) if isinstance(kernels, str) else kernels
        if verify_kernels == "triton" and k + 1 > 8:
            raise ValueError(f"the Triton verify step takes at most 8 tokens (k <= 7), got k = {k}: "
                             f"pass kernels=('triton', 'torch') to verify with the model's own layers")
        self.target, self.draft, self.k, self.max_seq = target, draft, k, max_seq
        self.temperature, self.top_k, self.top_p, self.scrub = temperature, top_k, top_p, scrub
        self.kernels = {"draft": draft_kernels if k else None, "verify": verify_kernels}
        self.verify_step = rows_step(target, verify_kernels, pdl)
        self.draft_step = rows_step(draft, draft_kernels, pdl) if k else None
        # greedy on the Triton verify step: the acceptance in one kernel (accept="torch" keeps the
        # PyTorch ops, the oracle it is tested against)
        if accept not in ("auto", "torch", "triton"):
            raise ValueError(f"accept must be 'auto', 'torch' or 'triton', got {accept!r}")
        fusable = verify_kernels == "triton" and temperature == 0
        if accept == "triton" and not fusable:
            raise ValueError("accept='triton' needs greedy decoding (temperature 0) and the Triton verify step")
        self.fused_accept = fusable and accept != "torch"
        self.use_graphs = self.device.type == "cuda" if use_graphs is None else use_graphs
        if self.use_graphs and self.device.type != "cuda":
            raise ValueError(f"use_graphs=True needs the models on a CUDA device, not {self.device}")
        self._buffers(seed)
        self.graph = None
        if self.use_graphs:
            from ...cuda_graphs.runner import capture
            self._reset_state(2)                       # warm-up rounds write at safe positions
            with torch.no_grad():
                self.graph = capture(self._round_body)
            torch.cuda.synchronize()

    # ------------------------------------------------------------------ state
    def _buffers(self, seed: int) -> None:
        k, dev, V = self.k, self.device, self.target.config.vocab_size
        long = dict(dtype=torch.long, device=dev)
        self.tcache = llama.StaticKVCache(self.target.config, 1, self.max_seq, self.dtype, dev)
        self.dcache = llama.StaticKVCache(self.draft.config, 1, self.max_seq, self.dtype, dev) if k else None
        self.seq = torch.zeros(self.max_seq + k + 3, **long)     # prompt + emitted (+ a round's overshoot)
        self.length = torch.zeros(1, **long)                      # tokens in seq; the last one is x
        self.offsets = torch.arange(-2, k + 1, **long)            # pos = length + offsets = P-1 .. P+k+1
        self.pos = torch.zeros(k + 3, **long)
        self.tail = torch.tensor([-2, -1], **long)
        self.pair_idx = torch.zeros(2, **long)
        self.buf = torch.zeros(k + 1, **long)                     # x, d_1 .. d_k: the verify step's input
        self.pair = torch.zeros(2, **long)                        # the tokens at P-1 and P: the draft's first input
        self.pair_out = torch.zeros(2, **long)
        self.tgt = torch.zeros(k + 1, **long)
        self.kept_counts = torch.zeros(max(k, 1), **long)         # rounds in which d_1..d_{i+1} were all kept
        self.generator = torch.Generator(device=dev).manual_seed(seed)
        if self.temperature > 0:
            f32 = dict(dtype=torch.float32, device=dev)
            self.q = torch.ones(max(k, 1), V, **f32)              # the draft's distributions at d_1..d_k
            self.u_draft = torch.rand(max(k, 1), V, **f32)
            self.u_accept = torch.rand(max(k, 1), **f32)
            self.u_draw = torch.rand(k + 1, V, **f32)
        self.rounds = 0
        self.prompt_len = 0
        self.trace: list[int] | None = None

    def _reset_state(self, length: int) -> None:
        self.length.fill_(length)
        self.kept_counts.zero_()
        self.rounds = 0

    # ------------------------------------------------------------------ one round (captured whole)
    def _round_body(self) -> None:
        k = self.k
        torch.add(self.offsets, self.length, out=self.pos)
        if k:
            self._draft_round()
        logits = self.verify_step(self.buf, self.pos[1:k + 2], self.tcache)      # [k+1, V]
        if self.fused_accept:        # one Triton kernel from the logits product's block maxima
            vals, idx = self.verify_step._argmax[k + 1]
            accept_greedy_fused(vals, idx, self.buf, self.seq, self.length, self.kept_counts, self.pair,
                                pdl=self.verify_step.pdl)
        else:
            self._accept(logits)
        if self.scrub:
            self._scrub(self.tcache, self.pos[1:k + 2])
            if k:
                self._scrub(self.dcache, self.pos[:k + 1])

    def _accept(self, logits: torch.Tensor) -> None:
        """The acceptance rule and the bookkeeping, in PyTorch (`decode_kernels/accept.py` fuses the greedy one)."""
        k = self.k
        if self.temperature == 0:
            self.verify_step.greedy(logits, out=self.tgt)
            emitted, n_new, kept = rules.accept_greedy(self.tgt[None], self.buf[None, 1:])
        else:
            p = rules.probabilities(logits, self.temperature, self.top_k, self.top_p)
            emitted, n_new, kept = rules.accept_sampled(p[None], self.q[None, :k], self.buf[None, 1:],
                                                        self.u_accept[None, :k], self.u_draw[None])
        self.seq.index_put_((self.pos[2:],), emitted[0])
        self.length.add_(n_new)
        if k:
            self.kept_counts.add_(kept[0])
        torch.add(self.tail, self.length, out=self.pair_idx)
        torch.index_select(self.seq, 0, self.pair_idx, out=self.pair)
        self.buf[:1].copy_(self.pair[1:])

    def _draft_round(self) -> None:
        k, step = self.k, self.draft_step
        logits = step(self.pair, self.pos[0:2], self.dcache)                    # tokens at P-1 and P
        if self.temperature == 0:
            step.greedy(logits, out=self.pair_out)
            self.buf[1:2].copy_(self.pair_out[1:])
        else:
            self._draw_draft(logits[1:], 0)
        for i in range(1, k):
            logits = step(self.buf[i:i + 1], self.pos[i + 1:i + 2], self.dcache)
            if self.temperature == 0:
                step.greedy(logits, out=self.buf[i + 1:i + 2])
            else:
                self._draw_draft(logits, i)

    def _draw_draft(self, logits: torch.Tensor, i: int) -> None:
        q = rules.probabilities(logits, self.temperature, self.top_k, self.top_p)   # [1, V]
        self.q[i:i + 1].copy_(q)
        self.buf[i + 1:i + 2].copy_(rules.gumbel_pick(q, self.u_draft[i:i + 1]))

    def _scrub(self, cache: llama.StaticKVCache, written: torch.Tensor) -> None:
        """Zero the K/V written at positions from the last token's on: the rejected tokens', and the
        last token's own position, which held a draft token the target replaced."""
        keep = (written < self.length - 1).to(cache.k.dtype)[:, None]
        for t in (cache.k, cache.v):
            t[:, 0, :, written] = t[:, 0, :, written] * keep

    def _fill_noise(self) -> None:
        for buf in (self.u_draft, self.u_accept, self.u_draw):
            buf.uniform_(generator=self.generator)

    @torch.no_grad()
    def round(self) -> None:
        """One round: noise (when sampling), then the captured round or the same code eagerly."""
        if self.temperature > 0:
            self._fill_noise()
        if self.graph is not None:
            self.graph.replay()
        else:
            self._round_body()
        self.rounds += 1
        if self.trace is not None:
            self.trace.append(int(self.length))       # a host sync a round: only when asked for

    # ------------------------------------------------------------------ a whole sequence
    @torch.no_grad()
    def start(self, prompt: list[int]) -> None:
        """Prefill both caches with the prompt and emit the target's first token."""
        p = len(prompt)
        if p < 1:
            raise ValueError("the prompt needs at least one token")
        V = self.target.config.vocab_size
        if any(not 0 <= t < V for t in prompt):
            raise ValueError(f"token ids must be in [0, {V})")
        if p + self.k + 3 > self.max_seq:
            raise ValueError(f"prompt length {p} leaves no room for a round of {self.k} draft tokens in max_seq "
                             f"{self.max_seq}")
        if self.scrub:
            for cache in (self.tcache, self.dcache):
                if cache is not None:
                    cache.k.zero_(), cache.v.zero_()
        tokens = torch.tensor([prompt], dtype=torch.long, device=self.device)
        logits = self.target.prefill(tokens, self.tcache)[:, -1]
        if self.k:
            self.draft.prefill(tokens, self.dcache)
        first = sampling.sample(logits, self.temperature, self.top_k, self.top_p, generator=self.generator)
        self.seq.zero_()
        self.seq[:p] = tokens[0]
        self.seq[p:p + 1] = first
        self._reset_state(p + 1)
        self.pair.copy_(self.seq[p - 1:p + 1])
        self.buf[:1].copy_(first)
        self.prompt_len = p

    @torch.no_grad()
    def generate(self, prompt: list[int], max_new_tokens: int, trace: bool = False) -> list[int]:
        """The first `max_new_tokens` new tokens after `prompt` (no early stop). Rounds are launched
        in batches of as many as certainly still needed (each emits at most k + 1 tokens), so the
        host waits for the device only a few times a sequence. trace=True keeps the length after
        every round (`provenance` turns it into which tokens the draft proposed)."""
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        end = len(prompt) + max_new_tokens
        if end + self.k + 2 > self.max_seq:
            raise ValueError(f"prompt length {len(prompt)} + {max_new_tokens} new tokens + a round of {self.k} "
                             f"exceeds max_seq {self.max_seq}")
        self.start(prompt)
        self.trace = [int(self.length)] if trace else None
        while True:
            have = int(self.length)            # the one host sync, once per batch of rounds
            if have >= end:
                break
            for _ in range(max(1, math.ceil((end - have) / (self.k + 1)))):
                self.round()
        return self.seq[len(prompt):end].tolist()

    def provenance(self, max_new_tokens: int) -> list[str]:
        """After generate(trace=True): for each new token, "prefill" (the first), "draft" (proposed
        by the draft and kept) or "target" (the target's own token that ends a round)."""
        if self.trace is None:
            raise ValueError("call generate(..., trace=True) first")
        out = ["prefill"]
        for before, after in zip(self.trace, self.trace[1:]):
            out += ["draft"] * (after - before - 1) + ["target"]
        return out[:max_new_tokens]

    def stats(self) -> dict:
        """Rounds, tokens emitted, and how often each draft position was kept (after `generate`)."""
        emitted = int(self.length) - self.prompt_len - 1          # the first token came from the prefill
        kept = self.kept_counts[:self.k].tolist() if self.k else []
        reached = [self.rounds] + kept[:-1]
        return {"k": self.k, "rounds": self.rounds, "emitted": emitted,
                "tokens_per_round": emitted / self.rounds if self.rounds else None,
                "kept_per_position": kept, "reached_per_position": reached,
                "acceptance_per_position": [a / r if r else None for a, r in zip(kept, reached)],
                "alpha": rules.alpha_from_counts(kept, self.rounds) if self.k and self.rounds else None,
                "kernels": dict(self.kernels), "graphs": self.graph is not None}
