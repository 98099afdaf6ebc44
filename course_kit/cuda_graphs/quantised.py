"""Batch-1 decode on int8 or int4 weights: the Triton step with its products on compressed weights.

Issue 48; notebook 01 §7 and 05. `QuantisedDecodeStep(model, "int8" | "int4")` is
`decode_kernels.TritonDecodeStep` (same kernel plan, same PDL, same greedy argmax) whose q/k/v,
output, MLP and logits products read packed int8 or int4 weights (`decode_kernels/woq_gemv.py`).
Embeddings, norms and the KV cache stay in the model's dtype. `DecodeGraphRunner(model,
kernels="triton", weights="int8")` captures it in a CUDA graph like the bf16 step.

What quantisation costs in quality is measured against the bf16 step on the same weights
(`compare_steps`): both steps decode the same 256 positions, teacher-forced on the reference's own
greedy tokens, so that one early disagreement does not make every later position differ; the
figures are the fraction of positions where the two pick the same token and the largest |Δlogit|.
`dequantised_model` is the oracle: the model whose weights are the dequantised ones, run eagerly.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..attention.paged_triton import paged_decode_triton
from ..models import llama
from .decode_kernels.gemv import gemv
from .decode_kernels.step import TritonDecodeStep, _version
from .decode_kernels.woq_gemv import FORMATS, QuantWeight, argmax_buffers, dequantise, quantise, woq_gemv, woq_qkv_rope
from ..dtypes import woq


@dataclass(frozen=True)
class LayerWeights:
    wqkv: QuantWeight
    wo: QuantWeight
    w13: QuantWeight
    w2: QuantWeight


def _matrices(model: llama.Transformer) -> dict[str, torch.Tensor]:
    """Every weight matrix the step multiplies by, by name (the head last)."""
    out = {}
    for i, layer in enumerate(model.layers):
        out.update({f"layers.{i}.wqkv": layer.attention.wqkv.weight, f"layers.{i}.wo": layer.attention.wo.weight,
                    f"layers.{i}.w13": layer.feed_forward.w13.weight, f"layers.{i}.w2": layer.feed_forward.w2.weight})
    out["head"] = model.head_weight
    return out


def quantise_model(model: llama.Transformer, weights: str, group_size: int = 128,
                   quantise_head: bool = True) -> tuple[list[LayerWeights], QuantWeight | None]:
    """The packed weights of every layer (and of the logits product unless quantise_head=False)."""
    if weights not in FORMATS:
        raise ValueError(f"weights must be one of {FORMATS}, got {weights!r}")
    packed = {}
    for name, w in _matrices(model).items():
        if name == "head" and not quantise_head:
            continue
        if weights == "int4" and w.shape[1] % group_size:
            raise ValueError(f"int4 group_size {group_size} must divide K of every matrix; {name} has K={w.shape[1]}")
        packed[name] = quantise(w, weights, group_size)
    layers = [LayerWeights(*(packed[f"layers.{i}.{m}"] for m in ("wqkv", "wo", "w13", "w2")))
              for i in range(len(model.layers))]
    return layers, packed.get("head")


class QuantisedDecodeStep(TritonDecodeStep):
    """TritonDecodeStep on int8 or int4 weights: (tokens [B], positions [B], cache) -> logits [B, V]."""

    def __init__(self, model: llama.Transformer, weights: str, group_size: int = 128, pdl: bool | None = None,
                 quantise_head: bool = True):
        if getattr(model, "comm", None) is not None:
            raise ValueError("QuantisedDecodeStep runs a whole model on one device, not a tensor-parallel shard")
        super().__init__(model, pdl=pdl, exchange=None)
        self.weights, self.group_size = weights, group_size
        self.layer_weights, self.head = quantise_model(model, weights, group_size, quantise_head)

    def attention_inputs(self, i: int, x: torch.Tensor, positions: torch.Tensor,
                         cache: llama.StaticKVCache) -> torch.Tensor:
        layer = self.model.layers[i]
        return woq_qkv_rope(self.layer_weights[i].wqkv, x, layer.attention_norm.weight, self.eps, positions,
                            self.model.inv_freq, cache.k[i], cache.v[i], self.n_heads, pdl=self.pdl)

    @torch.no_grad()
    def __call__(self, tokens: torch.Tensor, positions: torch.Tensor, cache: llama.StaticKVCache) -> torch.Tensor:
        model, b, pdl = self.model, tokens.shape[0], self.pdl
        x = F.embedding(tokens, model.tok_embeddings.weight)          # the residual stream [B, dim]
        table = self._table(b)
        for i, (layer, qw) in enumerate(zip(model.layers, self.layer_weights)):
            q = self.attention_inputs(i, x, positions, cache)
            k, v = cache.k[i].transpose(1, 2), cache.v[i].transpose(1, 2)
            o = paged_decode_triton(q, k, v, table, positions, self.scale, pdl=pdl, context_offset=1)
            x = woq_gemv(qw.wo, o.view(b, -1), residual=x, out=x, pdl=pdl)
            h = woq_gemv(qw.w13, x, prologue="norm", norm_weight=layer.ffn_norm.weight, eps=self.eps, pdl=pdl,
                         epilogue="swiglu")
            x = woq_gemv(qw.w2, h, residual=x, out=x, pdl=pdl)
        if b not in self._argmax:    # made once per batch size, before capture
            self._argmax[b] = (argmax_buffers(self.head, b, self.device) if self.head is not None else
                               _bf16_argmax_buffers(model.head_weight, b))
        if self.head is not None:
            logits = woq_gemv(self.head, x, prologue="norm", norm_weight=model.norm.weight, eps=self.eps, pdl=pdl,
                              argmax_into=self._argmax[b])
        else:
            logits = gemv(model.head_weight, x, prologue="norm", norm_weight=model.norm.weight, eps=self.eps,
                          pdl=pdl, argmax_into=self._argmax[b])
        self._blocks_of = (logits, _version(logits))
        return logits

    @torch.no_grad()
    def prefill(self, tokens: torch.Tensor, cache: llama.StaticKVCache) -> torch.Tensor:
        """tokens [B, T] from position 0, one position at a time through this step (so the prompt's
        K/V come from the quantised weights too) -> logits [B, T, V]."""
        b, t = tokens.shape
        out = [self(tokens[:, i].contiguous(), torch.full((b,), i, device=tokens.device), cache).clone()
               for i in range(t)]
        return torch.stack(out, dim=1)

    def bytes_per_token(self, context: int) -> int:
        """Bytes one batch-1 step reads: the packed weights, the bf16 head if kept, norms, one
        embedding row, and the K/V of `context` positions."""
        model, cfg = self.model, self.model.config
        packed = sum(w.nbytes for lw in self.layer_weights for w in (lw.wqkv, lw.wo, lw.w13, lw.w2))
        head = self.head.nbytes if self.head is not None else _nbytes(model.head_weight)
        return packed + head + _small_bytes(model) + cfg.kv_bytes_per_token(model.tok_embeddings.weight.dtype) * context


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _small_bytes(model: llama.Transformer) -> int:
    """The norms' weights and one embedding row: what a step reads besides its matrices and K/V."""
    norms = sum(_nbytes(p) for n, p in model.named_parameters() if n.endswith("norm.weight"))
    return norms + _nbytes(model.tok_embeddings.weight[0])


def bf16_bytes_per_token(model: llama.Transformer, context: int) -> int:
    """Bytes one batch-1 step of the unquantised Triton step reads, counted as `bytes_per_token`."""
    mats = sum(_nbytes(w) for w in _matrices(model).values())
    return mats + _small_bytes(model) + model.config.kv_bytes_per_token(model.tok_embeddings.weight.dtype) * context


def _bf16_argmax_buffers(weight: torch.Tensor, b: int):
    from .decode_kernels.gemv import argmax_buffers as bf16_buffers
    return bf16_buffers(weight, b)


# ----------------------------------------------------------------------------- quality

@torch.no_grad()
def compare_steps(reference, candidate, cfg: llama.ModelConfig, positions: int, dtype: torch.dtype,
                  device: str | torch.device, first_token: int = 1) -> dict:
    """Two decode steps on `positions` positions of one sequence, each on its own cache, both fed the
    reference's greedy tokens: the fraction of positions whose greedy tokens agree, and the largest
    |Δlogit| (float32) over all of them."""
    if positions < 1 or positions > cfg.max_seq_len:
        raise ValueError(f"positions must lie in [1, {cfg.max_seq_len}], got {positions}")
    caches = [llama.StaticKVCache(cfg, 1, positions, dtype, device) for _ in range(2)]
    token = torch.tensor([first_token], device=device)
    agree = torch.zeros((), dtype=torch.long, device=device)
    worst = torch.zeros((), dtype=torch.float32, device=device)
    for p in range(positions):
        at = torch.tensor([p], device=device)
        want, got = reference(token, at, caches[0]).float(), candidate(token, at, caches[1]).float()
        agree += (want.argmax(-1) == got.argmax(-1)).sum()
        worst = torch.maximum(worst, (want - got).abs().max())
        token = want.argmax(-1)
    return {"positions": positions, "agreement": agree.item() / positions, "max_abs_dlogit": worst.item()}


def dequantised_model(model: llama.Transformer, weights: str, group_size: int = 128,
                      quantise_head: bool = True) -> llama.Transformer:
    """A copy of `model` whose matrices are the dequantised weights (rounded to the model's dtype;
    untied from the embeddings when the head is quantised): the oracle of the quantised step."""
    layers, head = quantise_model(model, weights, group_size, quantise_head)
    twin = copy.deepcopy(model)
    dtype = model.tok_embeddings.weight.dtype
    with torch.no_grad():
        for layer, lw in zip(twin.layers, layers):
            for mod, qw in ((layer.attention.wqkv, lw.wqkv), (layer.attention.wo, lw.wo),
                            (layer.feed_forward.w13, lw.w13), (layer.feed_forward.w2, lw.w2)):
                mod.weight.copy_(dequantise(qw).to(dtype))
        if head is not None:
            twin.output = torch.nn.Linear(model.config.dim, model.config.vocab_size, bias=False,
                                          device=model.tok_embeddings.weight.device, dtype=dtype)
            twin.output.weight.copy_(dequantise(head).to(dtype))
    return twin


# ----------------------------------------------------------------------------- the lesson's live runs

def packed_products(n: int, k: int, device: str, dtype: torch.dtype, group_size: int = 128,
                    seed: int = 0) -> list[dict]:
    """Notebook 01 §7's live check: a random n x k weight (scaled as the course models draw theirs) in
    int8 and int4, one row of activations through the fused kernels (Triton's interpreter on a CPU),
    each against the fp32 matmul of its dequantised weights. Rows for woq_explain.explain_packed."""
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(n, k, generator=g) * 0.02).to(device)
    x = torch.randn(1, k, generator=g).to(device=device, dtype=dtype)
    rows = []
    for fmt in FORMATS:
        qw = quantise(w, fmt, group_size)
        y = woq_gemv(qw, x)
        want = x.float() @ dequantise(qw).T
        rows.append({"format": fmt, "n": n, "k": k, "group_size": group_size, "bytes": qw.nbytes,
                     "dense_bytes": n * k * torch.empty((), dtype=dtype).element_size(),
                     "dense_dtype": str(dtype).replace("torch.", ""),
                     "rel_error": ((y.float() - want).abs().max() / want.abs().max()).item()})
    return rows


def quality_live(model: llama.Transformer, positions: int, group_size: int = 128) -> tuple[dict, str]:
    """int8 and int4 against the unquantised step on `model`'s weights, teacher-forced over
    `positions`: on a GPU the Triton steps themselves; on a CPU their oracle (the model with the
    dequantised weights, run eagerly: the kernels' numbers, tests/test_woq_decode.py), since the
    interpreter would take minutes. Returns ({format: compare_steps(...)}, which path ran)."""
    dev, dtype, cfg = model.tok_embeddings.weight.device, model.tok_embeddings.weight.dtype, model.config
    gpu = dev.type == "cuda"
    ref = TritonDecodeStep(model) if gpu else model.decode
    out = {}
    for fmt in FORMATS:
        cand = QuantisedDecodeStep(model, fmt, group_size) if gpu else dequantised_model(model, fmt, group_size).decode
        out[fmt] = compare_steps(ref, cand, cfg, positions, dtype, dev)
    how = ("the Triton decode steps themselves ran, on this GPU" if gpu else
           "this CPU ran their oracle, the model with the dequantised weights, eagerly (the fused kernels compute "
           "the same numbers; Triton's interpreter would take minutes)")
    return out, how


# ----------------------------------------------------------------------------- where int4 runs

def int4_path(device: str | torch.device) -> tuple[str, str | None]:
    """Which kernel multiplies int4 weights on `device`, as the course decides for it (T4 emulation
    included): torch's tinygemm (`_weight_int4pack_mm`) where it is built for the GPU, else the
    course's own fused kernel, with the reason. On a CPU torch's CPU kernel."""
    why = woq.int4_unavailable(device)
    if why is None:
        return ("aten._weight_int4pack_mm" if torch.device(device).type == "cuda" else
                "aten._weight_int4pack_mm_for_cpu"), None
    return "course woq_gemv (Triton)", f"{why}: the course's fused int4 kernel runs instead"
