"""The course model: a compact Llama (RMSNorm, RoPE with Llama 3 scaling, GQA, SwiGLU).

Every forward pass runs the same layer loop (`_run_layers`); they differ only in where K/V are
written and read, which each one passes to every layer as an `attend(q, k, v)` function:
- `forward(tokens)`            no cache, causal attention over the whole prompt (tests, training);
- `prefill(tokens, cache)`     fills a `StaticKVCache` from position 0;
- `decode(tokens, pos, cache)` one token per sequence, static shapes, no host sync (CUDA graphs);
- `forward_paged(batch, pc)`   any mix of prefill and decode over a `PagedKVCache` (the engine).

Weights are fused where it saves reads at batch 1: q, k, v in one `wqkv`, gate and up in one `w13`.
Attention itself is imported from `course_kit.attention`; `set_attention` swaps the kernels.
To and from HF transformers (the oracle, and real checkpoints): `models/hf.py`, which imports this
module and never the other way round.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..attention.gqa import sdpa_gqa
from ..attention.registry import (DECODE_ATTENTION, PAGED_ATTENTION, default_paged, lookup,  # noqa: F401
                                  register_attention)
from .kv_cache import PagedBatch, PagedKVCache, StaticKVCache
from . import sampling

SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@dataclass
class ModelConfig:
    vocab_size: int
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    ffn_dim: int
    head_dim: int = 0                 # 0 means dim // n_heads
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: dict | None = None  # Llama 3: {"factor", "low_freq_factor", "high_freq_factor",
                                      #           "original_max_position_embeddings"}
    max_seq_len: int = 2048           # max positions
    tie_embeddings: bool = True
    name: str = field(default="custom", compare=False)

    def __post_init__(self):
        if self.head_dim == 0:
            self.head_dim = self.dim // self.n_heads
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})")

    @classmethod
    def from_preset(cls, name: str) -> "ModelConfig":
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; choices: {sorted(PRESETS)}")
        return replace(PRESETS[name])

    def num_params(self) -> int:
        attn = self.dim * (self.n_heads + 2 * self.n_kv_heads) * self.head_dim + self.n_heads * self.head_dim * self.dim
        layer = attn + 3 * self.dim * self.ffn_dim + 2 * self.dim
        emb = self.vocab_size * self.dim * (1 if self.tie_embeddings else 2)
        return self.n_layers * layer + emb + self.dim

    def kv_bytes_per_token(self, dtype: torch.dtype) -> int:
        """Bytes of K and V one position occupies across all layers."""
        return 2 * self.n_layers * self.n_kv_heads * self.head_dim * torch.empty((), dtype=dtype).element_size()


LLAMA3_SCALING = {"factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 8192}
PRESETS: dict[str, ModelConfig] = {
    "tiny": ModelConfig(vocab_size=256, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=160,
                        max_seq_len=512, name="tiny"),
    "smollm-135m": ModelConfig(vocab_size=49152, dim=576, n_layers=30, n_heads=9, n_kv_heads=3,
                               ffn_dim=1536, max_seq_len=2048, name="smollm-135m"),
    "llama-1b": ModelConfig(vocab_size=128256, dim=2048, n_layers=16, n_heads=32, n_kv_heads=8,
                            ffn_dim=8192, rope_theta=500000.0, rope_scaling=dict(LLAMA3_SCALING),
                            max_seq_len=131072, name="llama-1b"),
}


# ----------------------------------------------------------------------------- building blocks

def rope_inv_freq(cfg: ModelConfig) -> torch.Tensor:
    """Inverse frequencies of RoPE, with Llama 3's scaling (long wavelengths stretched by `factor`)."""
    d = cfg.head_dim
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    s = cfg.rope_scaling
    if not s:
        return inv_freq
    factor, lo, hi = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
    old_len = s["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > old_len / lo, inv_freq / factor, inv_freq)
    # between the two cut-offs, blend the scaled and unscaled frequencies smoothly
    smooth = (old_len / wavelen - lo) / (hi - lo)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old_len / hi) & (wavelen <= old_len / lo)
    return torch.where(medium, blended, scaled)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x[i], x[i + D/2]) by angle position * inv_freq[i]; x [..., heads, D]."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()  # the mean of squares in fp32: bf16 would lose it
        return self.weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_heads, self.n_kv, self.head_dim = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.wqkv = nn.Linear(cfg.dim, (cfg.n_heads + 2 * cfg.n_kv_heads) * cfg.head_dim, bias=False)
        self.wo = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.dim, bias=False)

    def qkv(self, x: torch.Tensor):
        """x [..., dim] -> q [..., H, D], k and v [..., n_kv, D]."""
        sizes = [self.n_heads * self.head_dim, self.n_kv * self.head_dim, self.n_kv * self.head_dim]
        q, k, v = self.wqkv(x).split(sizes, dim=-1)
        lead = x.shape[:-1]
        return (q.view(*lead, self.n_heads, self.head_dim), k.view(*lead, self.n_kv, self.head_dim),
                v.view(*lead, self.n_kv, self.head_dim))


class FeedForward(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.ffn_dim = cfg.ffn_dim
        self.w13 = nn.Linear(cfg.dim, 2 * cfg.ffn_dim, bias=False)  # [gate; up]
        self.w2 = nn.Linear(cfg.ffn_dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.w13(x).split(self.ffn_dim, dim=-1)
        return self.w2(F.silu(gate) * up)


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.attention_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attention = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.feed_forward = FeedForward(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, attend: Callable) -> torch.Tensor:
        q, k, v = self.attention_inputs(x, cos, sin)
        return self.attention_outputs(x, attend(q, k, v))

    # The two halves around attention hold only tensors, so each can be compiled on its own and
    # fused into a few kernels, whatever attend() is (engine.model_runner.fuse_around_attention).
    def attention_inputs(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """Norm, q/k/v projection and RoPE: x [..., dim] -> q [..., H, D], k, v [..., n_kv, D]."""
        q, k, v = self.attention.qkv(self.attention_norm(x))
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def attention_outputs(self, x: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        """Output projection and residual, then the MLP and its residual."""
        x = x + self.attention.wo(o.flatten(-2))
        return x + self.feed_forward(self.ffn_norm(x))


# How each pass reads and writes K/V. Module-level functions bound with functools.partial (tensors
# and constants only), so one compiled Block serves every layer (see cuda_graphs.fuse_layers).
def _prefill_attend(q, k, v, *, k_cache, v_cache, scale):
    B, T = q.shape[:2]
    k_cache[:B, :, :T] = k.transpose(1, 2)
    v_cache[:B, :, :T] = v.transpose(1, 2)
    return _causal(q, k, v, scale)


def _decode_attend(q, k, v, *, k_cache, v_cache, rows, positions, fn, scale):
    k_cache[rows, :, positions] = k  # index_put: each row writes at its own position
    v_cache[rows, :, positions] = v
    B = q.shape[0]
    return fn(q, k_cache[:B], v_cache[:B], positions, scale)


def _paged_attend(q, k, v, *, k_cache, v_cache, slots, batch, fn, scale):
    k_cache.view(-1, *k.shape[1:])[slots] = k
    v_cache.view(-1, *v.shape[1:])[slots] = v
    return fn(q, k_cache, v_cache, batch, scale)


def _causal(q, k, v, scale):
    """[B, T, heads, D] in, causal attention over the T tokens, [B, T, H, D] out."""
    o = sdpa_gqa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), None, scale, is_causal=True)
    return o.transpose(1, 2)


# ----------------------------------------------------------------------------- the model

class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.config = cfg
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.output = None if cfg.tie_embeddings else nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        self.register_buffer("inv_freq", rope_inv_freq(cfg), persistent=False)
        self.scale = cfg.head_dim ** -0.5
        self.decode_attention: Callable = DECODE_ATTENTION["grouped"]
        self.paged_attention: Callable | None = None  # None: "reference" on CPU, "gather" on GPU

    def _apply(self, fn, recurse=True):
        # model.to(bf16) would round the RoPE frequencies too; rebuild them in fp32 on the new device
        super()._apply(fn, recurse)
        self.inv_freq = rope_inv_freq(self.config).to(self.inv_freq.device)
        return self

    # -- construction
    @classmethod
    def from_config(cls, cfg: ModelConfig, seed: int = 0, dtype: torch.dtype = torch.float32,
                    device: str | torch.device = "cpu") -> "Transformer":
        """Seeded random weights (N(0, 0.02) matrices, unit norms), drawn on `device`."""
        _check_dtype(dtype)
        with torch.device(device):  # (a meta-device build would import dynamo: seconds on a CPU)
            model = cls(cfg)
        gen = torch.Generator(device=device).manual_seed(seed)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith("norm.weight"):
                    p.fill_(1.0)
                else:
                    p.normal_(0.0, 0.02, generator=gen)
        return model.to(dtype).eval()

    @classmethod
    def from_preset(cls, name: str, seed: int = 0, dtype: torch.dtype = torch.float32,
                    device: str | torch.device = "cpu") -> "Transformer":
        return cls.from_config(ModelConfig.from_preset(name), seed=seed, dtype=dtype, device=device)

    def set_attention(self, decode: str | Callable | None = None, paged: str | Callable | None = None) -> None:
        """Plug in attention kernels, by registered name or as callables (see attention/registry.py)."""
        if decode is not None:
            self.decode_attention = lookup("decode", decode)
        if paged is not None:
            self.paged_attention = lookup("paged", paged)

    # -- the shared layer loop
    def _run_layers(self, tokens: torch.Tensor, positions: torch.Tensor, attend_for: Callable) -> torch.Tensor:
        """tokens/positions [...] -> final hidden states [..., dim]; attend_for(i) is layer i's attend."""
        x = self.tok_embeddings(tokens)
        angles = positions.float()[..., None] * self.inv_freq                # [..., D/2]
        cos, sin = angles.cos()[..., None, :].to(x.dtype), angles.sin()[..., None, :].to(x.dtype)
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, attend_for(i))
        return self.norm(x)

    @property
    def head_weight(self) -> torch.Tensor:
        """The output projection [V, dim]: the embedding table when the two are tied."""
        return self.tok_embeddings.weight if self.output is None else self.output.weight

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        return F.linear(h, self.head_weight)

    # -- forward passes
    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [B, T] from position 0, no cache -> logits [B, T, V]."""
        B, T = self._check_tokens(tokens)
        positions = torch.arange(T, device=tokens.device).expand(B, T)
        causal = partial(_causal, scale=self.scale)
        return self.logits(self._run_layers(tokens, positions, lambda i: causal))

    @torch.no_grad()
    def prefill(self, tokens: torch.Tensor, cache: StaticKVCache) -> torch.Tensor:
        """tokens [B, T], every row starting at position 0; writes K/V to cache rows 0..B-1."""
        B, T = self._check_tokens(tokens, cache.max_seq)
        if B > cache.max_batch:
            raise ValueError(f"batch {B} exceeds the cache's max_batch {cache.max_batch}")
        positions = torch.arange(T, device=tokens.device).expand(B, T)
        return self.logits(self._run_layers(tokens, positions, lambda i: partial(
            _prefill_attend, k_cache=cache.k[i], v_cache=cache.v[i], scale=self.scale)))

    @torch.no_grad()
    def decode(self, tokens: torch.Tensor, positions: torch.Tensor, cache: StaticKVCache) -> torch.Tensor:
        """One new token per row: tokens, positions [B] -> logits [B, V]. Static shapes, no host sync."""
        B = tokens.shape[0]
        rows = torch.arange(B, device=tokens.device)
        return self.logits(self._run_layers(tokens, positions, lambda i: partial(
            _decode_attend, k_cache=cache.k[i], v_cache=cache.v[i], rows=rows, positions=positions,
            fn=self.decode_attention, scale=self.scale)))

    @torch.no_grad()
    def forward_paged(self, batch: PagedBatch, cache: PagedKVCache,
                      attention: str | Callable | None = None) -> torch.Tensor:
        """New tokens of B sequences -> logits of each sequence's last new token [B, V].
        `attention` (a registered name or a callable) is this call's paged attention; the engine
        passes its own here, so running an engine never rewires the model. Without it: the one
        set with `set_attention`, else the registry's default for the device."""
        if attention is not None:
            attn = lookup("paged", attention)
        else:
            attn = self.paged_attention or PAGED_ATTENTION[default_paged(batch.tokens.device)]
        slots = batch.slot_mapping.long()
        h = self._run_layers(batch.tokens, batch.positions, lambda i: partial(
            _paged_attend, k_cache=cache.k[i], v_cache=cache.v[i], slots=slots, batch=batch, fn=attn,
            scale=self.scale))
        return self.logits(h[batch.query_start[1:].long() - 1])

    def _check_tokens(self, tokens: torch.Tensor, limit: int | None = None) -> tuple[int, int]:
        if tokens.dim() != 2:
            raise ValueError(f"tokens must be [batch, length], got shape {tuple(tokens.shape)}")
        B, T = tokens.shape
        limit = min(limit or self.config.max_seq_len, self.config.max_seq_len)
        if not 1 <= T <= limit:
            raise ValueError(f"prompt length {T} is outside [1, {limit}] (max positions)")
        return B, T


def _check_dtype(dtype: torch.dtype) -> None:
    if dtype not in SUPPORTED_DTYPES:
        raise ValueError(f"unsupported dtype {dtype}; choices: {list(SUPPORTED_DTYPES)}")


# ----------------------------------------------------------------------------- a reference loop

@torch.no_grad()
def generate(model: Transformer, prompts: list[list[int]], max_new_tokens: int, *, cache: str = "static",
             temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
             generator: torch.Generator | None = None, block_size: int = 16) -> list[list[int]]:
    """Generate `max_new_tokens` for each prompt (no early stop); returns the new tokens only.

    cache="static": right-pad the prompts, prefill once, then decode the batch step by step.
    cache="paged":  the same through `forward_paged`, each sequence owning consecutive blocks.
    """
    cfg, dev = model.config, model.tok_embeddings.weight.device
    if cache not in ("static", "paged"):
        raise ValueError(f"cache must be 'static' or 'paged', got {cache!r}")
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("prompts must be a non-empty list of non-empty token lists")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    longest = max(len(p) for p in prompts)
    if longest + max_new_tokens > cfg.max_seq_len:
        raise ValueError(f"prompt length {longest} + max_new_tokens {max_new_tokens} exceeds the "
                         f"model's max positions {cfg.max_seq_len}")
    if any(not 0 <= t < cfg.vocab_size for p in prompts for t in p):
        raise ValueError(f"token ids must be in [0, {cfg.vocab_size})")
    lens = torch.tensor([len(p) for p in prompts], device=dev)
    B, total = len(prompts), longest + max_new_tokens
    pick = lambda logits: sampling.sample(logits, temperature, top_k, top_p, generator)  # noqa: E731
    out: list[torch.Tensor] = []
    if cache == "static":
        kv = StaticKVCache(cfg, B, total, model.tok_embeddings.weight.dtype, dev)
        padded = torch.zeros(B, longest, dtype=torch.long, device=dev)
        for b, p in enumerate(prompts):
            padded[b, :len(p)] = torch.tensor(p)
        logits = model.prefill(padded, kv)[torch.arange(B, device=dev), lens - 1]
        positions = lens.clone()
        for _ in range(max_new_tokens):
            out.append(pick(logits))
            if len(out) < max_new_tokens:
                logits = model.decode(out[-1], positions, kv)
                positions += 1
    else:
        blocks_per_seq = -(-total // block_size)
        kv = PagedKVCache(cfg, B * blocks_per_seq, block_size, model.tok_embeddings.weight.dtype, dev)
        tables = torch.arange(B * blocks_per_seq, device=dev, dtype=torch.int32).view(B, blocks_per_seq)
        tokens = torch.tensor([t for p in prompts for t in p], device=dev)
        positions = torch.cat([torch.arange(len(p), device=dev) for p in prompts])
        seq = torch.repeat_interleave(torch.arange(B, device=dev), lens)
        ctx = lens.clone()
        query_start = F.pad(torch.cumsum(lens, 0), (1, 0)).int()
        for _ in range(max_new_tokens):
            slots = tables[seq, positions // block_size].long() * block_size + positions % block_size
            batch = PagedBatch(tokens, positions, slots, query_start, ctx.int(), tables)
            out.append(pick(model.forward_paged(batch, kv)))
            tokens, positions, seq = out[-1], ctx.clone(), torch.arange(B, device=dev)
            ctx = ctx + 1
            query_start = torch.arange(B + 1, device=dev, dtype=torch.int32)
    return torch.stack(out, 1).tolist()
