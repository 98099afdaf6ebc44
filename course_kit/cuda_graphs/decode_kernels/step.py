"""The course model's decode step in five Triton kernels a layer (notebook 05).

`TritonDecodeStep(model)` computes what `model.decode(tokens, positions, cache)` computes, on the
same weights and the same `StaticKVCache`, with a different kernel plan per layer:

    eager step (models/llama.py)                   this step
    RMSNorm, wqkv, split, cos/sin, RoPE x2,        1. qkv_rope (the product, then RoPE and the
    K/V index_put x2                                  K/V append in its store)
    attention (two products and a softmax)         2. paged_decode_triton on the static cache,
                                                   3. and the merge of its context slices
    wo, residual add                               4. gemv(wo, residual=x)        (in place)
    RMSNorm, w13, split, silu, mul                 5. gemv(w13, prologue="norm", epilogue="swiglu")
    w2, residual add                               6. gemv(w2, residual=x)        (in place)
(five or six: the merge runs only when the context is cut into slices), then the final norm
and the logits in one `gemv(prologue="norm")`, whose store also keeps each program's largest logit,
so the greedy token takes one small kernel (`argmax.tokens_from_blocks`) instead of PyTorch's
one-block reduction.

Attention reuses notebook 06's paged decode kernel: a static cache row [n_kv, S, D] is a paged
cache whose one block holds all S positions, so the block table is just the row number. Nothing
here synchronises with the host and every shape is fixed for a batch size: the step can be
captured in a CUDA graph (`DecodeGraphRunner(kernels="triton")`). On Hopper every kernel is
launched with programmatic dependent launch (`pdl`), so each starts while the previous one ends.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ...attention.paged_triton import paged_decode_triton
from ...models import llama
from .argmax import greedy_tokens, tokens_from_blocks
from .exchange import Exchange, Sum
from .gemv import HAS_PDL, argmax_buffers, gemv
from .qkv_rope import qkv_rope
from ...device import current_capability


def pdl_supported(device: torch.device) -> bool:
    """Programmatic dependent launch needs Hopper (compute capability 9.0) or newer."""
    capability = current_capability(device)
    return HAS_PDL and capability is not None and capability[0] >= 9


class TritonDecodeStep:
    """A callable with `model.decode`'s signature: (tokens [B], positions [B], cache) -> logits [B, V]."""

    def __init__(self, model: llama.Transformer, pdl: bool | None = None, exchange: Exchange | str | None = "auto"):
        self.model, cfg = model, model.config
        self.device = model.tok_embeddings.weight.device
        self.pdl = pdl_supported(self.device) if pdl is None else pdl
        if self.pdl and not pdl_supported(self.device):
            raise ValueError(f"pdl=True needs a CUDA GPU of compute capability >= 9.0 and a Triton with "
                             f"gdc_wait; this is {self.device}")
        self.n_heads, self.eps, self.scale = cfg.n_heads, cfg.norm_eps, model.scale
        self._tables: dict[int, torch.Tensor] = {}
        self._argmax: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self._blocks_of: tuple[torch.Tensor, int] | None = None   # (logits, their _version) of _argmax
        # a tensor-parallel shard (parallel/tp_llama.py) holds a slice of every weight, the head's
        # a slice of the vocabulary; its products are summed or gathered across ranks through the
        # communication it carries (`model.comm`, a parallel.tp_llama.TPComm); a whole model has none
        self.comm = getattr(model, "comm", None)
        self.rank, self.world = (self.comm.rank, self.comm.world) if self.comm is not None else (0, 1)
        # ... by an all-reduce kernel, or folded into the products (exchange.py): "auto" folds
        # them where symmetric memory works (GPUs joined by NVLink), None keeps the all-reduce
        head_blocks = argmax_buffers(model.head_weight, 1)[0].shape[1]   # the logits product's programs
        if exchange == "auto":
            exchange = None
            if self.world > 1 and self.device.type == "cuda":
                exchange = Exchange.for_group(self.comm, cfg.n_layers, cfg.dim, model.head_weight.shape[0] * self.world,
                                              model.head_weight.dtype, self.device, head_blocks=head_blocks)
        self.exchange = exchange
        if exchange is not None:
            self.rank, self.world = exchange.rank, exchange.world
            if exchange.head_blocks != head_blocks or exchange.dim != cfg.dim:
                raise ValueError(f"the exchange was made for dim {exchange.dim} and {exchange.head_blocks} logits "
                                 f"blocks; this shard has dim {cfg.dim} and {head_blocks}")

    def _table(self, b: int) -> torch.Tensor:
        """Block table of a static cache: row r's one block is block r (made once per batch size,
        before capture, so the graph reads a buffer that lives as long as the step)."""
        if b not in self._tables:
            self._tables[b] = torch.arange(b, dtype=torch.int32, device=self.device).view(b, 1)
        return self._tables[b]

    @torch.no_grad()
    def __call__(self, tokens: torch.Tensor, positions: torch.Tensor, cache: llama.StaticKVCache) -> torch.Tensor:
        model, b, pdl = self.model, tokens.shape[0], self.pdl
        x = F.embedding(tokens, model.tok_embeddings.weight)          # the residual stream [B, dim]
        table = self._table(b)
        for i, layer in enumerate(model.layers):
            attn, ffn = layer.attention, layer.feed_forward
            q = self.attention_inputs(i, x, positions, cache)
            # [B, n_kv, S, D] read as [blocks=B, block_size=S, n_kv, D]: one block per row
            k, v = cache.k[i].transpose(1, 2), cache.v[i].transpose(1, 2)
            # row b's context is its position + 1 keys: the kernel adds the 1 (no kernel of its own)
            o = paged_decode_triton(q, k, v, table, positions, self.scale, pdl=pdl, context_offset=1)
            x = self._add_product(attn.wo.weight, o.view(b, -1), x, 2 * i)
            # silu(gate) * up in w13's store, so w2 loads a plain x: 13-15 µs a token shorter on the
            # H200 than forming it in w2's load, where each program forms every activation it reads
            # (data/reference/h200/logs/decode-probe-4-s8.json)
            h = gemv(ffn.w13.weight, x, prologue="norm", norm_weight=layer.ffn_norm.weight, eps=self.eps,
                     pdl=pdl, epilogue="swiglu")
            x = self._add_product(ffn.w2.weight, h, x, 2 * i + 1)
        if self.exchange is not None:   # every rank's slice into every rank's logits, then wait for them
            gemv(model.head_weight, x, prologue="norm", norm_weight=model.norm.weight, eps=self.eps, pdl=pdl,
                 out=self.exchange.push_logits(b), argmax_into=self.exchange.blocks(b))
            self.exchange.pushed()
            logits = self.exchange.finish(b, pdl)
            self._blocks_of = (logits, _version(logits))
            return logits
        if self.world > 1:   # each rank holds a slice of the vocabulary: gather, then argmax the whole
            logits = gemv(model.head_weight, x, prologue="norm", norm_weight=model.norm.weight, eps=self.eps, pdl=pdl)
            return self.comm.gather_last(logits)
        if b not in self._argmax:    # made once per batch size, before capture (like _table)
            self._argmax[b] = argmax_buffers(model.head_weight, b)
        logits = gemv(model.head_weight, x, prologue="norm", norm_weight=model.norm.weight, eps=self.eps, pdl=pdl,
                      argmax_into=self._argmax[b])
        self._blocks_of = (logits, _version(logits))
        return logits

    def attention_inputs(self, i: int, x: torch.Tensor | Sum, positions: torch.Tensor,
                         cache: llama.StaticKVCache) -> torch.Tensor:
        """Layer i's norm, q/k/v projection and RoPE: rotated q [B, H, D]; k and v go into the cache."""
        layer = self.model.layers[i]
        return qkv_rope(layer.attention.wqkv.weight, x, layer.attention_norm.weight, self.eps, positions,
                        self.model.inv_freq, cache.k[i], cache.v[i], self.n_heads, pdl=self.pdl)

    def _add_product(self, weight: torch.Tensor, h: torch.Tensor, x: torch.Tensor | Sum, e: int) -> torch.Tensor | Sum:
        """x + h @ weight.T. On one GPU the sum is written into x in place. Under tensor
        parallelism each rank holds a slice of K (row parallel) and only rank 0 adds x, so that x
        enters the sum once. The ranks' products are summed by one all-reduce, or, with an
        exchange, pushed to every rank as exchange e, and the next kernels read their Sum."""
        if self.world == 1:
            return gemv(weight, h, residual=x, out=x, pdl=self.pdl)
        residual = x if self.rank == 0 else None
        if self.exchange is not None:
            gemv(weight, h, residual=residual, out=self.exchange.push_x(e, h.shape[0]), pdl=self.pdl)
            self.exchange.pushed()
            return self.exchange.sum_x(e, h.shape[0])
        return self.comm.all_reduce_sum(gemv(weight, h, residual=residual, pdl=self.pdl))

    def greedy(self, logits: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """The greedy token of each row (`sampling.sample` at temperature 0). For the logits this step
        just made, untouched since (torch counts in-place changes in `_version`), their blocks' maxima
        are known already: one kernel; otherwise (or for inference-mode tensors, which keep no
        count) two."""
        made, b = self._blocks_of, logits.shape[0]
        if made is not None and logits is made[0] and made[1] is not None and _version(logits) == made[1]:
            blocks = self.exchange.blocks(b) if self.exchange is not None else self._argmax[b]
            return tokens_from_blocks(*blocks, pdl=self.pdl, out=out)
        tokens = greedy_tokens(logits, pdl=self.pdl)
        return tokens if out is None else out.copy_(tokens)


def _version(t: torch.Tensor) -> int | None:
    """torch's count of t's in-place changes; None for an inference tensor, which keeps none."""
    return None if t.is_inference() else t._version
