"""A small GPT-style decoder for notebooks 02 (AMP) and 03 (torch.compile).

Pre-norm blocks (LayerNorm, causal attention through SDPA, GELU MLP), tied embeddings. Sizes come
from presets so the same code runs a 0.1M-parameter smoke model on a CPU and a few-hundred-million
parameter model that fills an H200. It also has a static-shape, sync-free batch-1 decode step over
a fixed-size KV cache, so that `torch.compile(mode="reduce-overhead")` can capture it in a CUDA graph.

Training data is generated locally: token streams from a seeded random sparse Markov chain, which a
model can learn (the loss falls well below log(vocab)) without downloading anything.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass(frozen=True)
class GPTConfig:
    vocab: int = 256
    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 4
    seq_len: int = 128
    mlp_ratio: int = 4

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def n_params(self) -> int:
        """Parameters (embeddings counted once, they are tied to the output layer)."""
        d, f = self.d_model, self.d_model * self.mlp_ratio
        per_layer = 4 * d * d + 4 * d + 2 * d * f + f + d + 4 * d  # attn, mlp, two LayerNorms
        return self.vocab * d + self.seq_len * d + self.n_layers * per_layer + 2 * d


PRESETS: dict[str, GPTConfig] = {
    "smoke": GPTConfig(vocab=64, d_model=32, n_layers=2, n_heads=2, seq_len=32),
    "cpu": GPTConfig(vocab=256, d_model=128, n_layers=4, n_heads=4, seq_len=128),
    "small_gpu": GPTConfig(vocab=8192, d_model=512, n_layers=8, n_heads=8, seq_len=512),
    # ~0.34B parameters: strict fp32 at batch 8 x 1024 tokens keeps ~25 GiB of activations (32: ~95 GiB).
    "full": GPTConfig(vocab=32768, d_model=1024, n_layers=24, n_heads=16, seq_len=1024),
}


def config(preset: str, **overrides: int) -> GPTConfig:
    """The preset config with optional field overrides; ValueError names the valid presets."""
    if preset not in PRESETS:
        raise ValueError(f"unknown GPT preset {preset!r}; valid presets: {sorted(PRESETS)}")
    return replace(PRESETS[preset], **overrides)


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.fc = nn.Linear(cfg.d_model, cfg.mlp_ratio * cfg.d_model)
        self.out = nn.Linear(cfg.mlp_ratio * cfg.d_model, cfg.d_model)

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        b, s, _ = t.shape
        return t.view(b, s, self.cfg.n_heads, self.cfg.head_dim).transpose(1, 2)

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(F.gelu(self.fc(self.ln2(x))))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        a = F.scaled_dot_product_attention(self._heads(q), self._heads(k), self._heads(v), is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(x.shape))
        return x + self.mlp(x)

    def decode(self, x: torch.Tensor, pos: torch.Tensor, k_cache: torch.Tensor,
               v_cache: torch.Tensor) -> torch.Tensor:
        """One new token per row. x: [B, 1, d]; pos: [1] int64; caches: [B, H, S, Dh], written in place."""
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        q, k, v = self._heads(q), self._heads(k), self._heads(v)
        k_cache.index_copy_(2, pos, k)
        v_cache.index_copy_(2, pos, v)
        # Attend over the whole static cache with a mask instead of slicing to pos: shapes stay fixed
        # and nothing reads pos on the host, so the step can be captured in a CUDA graph.
        visible = torch.arange(k_cache.shape[2], device=x.device) <= pos
        a = F.scaled_dot_product_attention(q, k_cache, v_cache, attn_mask=visible.view(1, 1, 1, -1))
        x = x + self.proj(a.transpose(1, 2).reshape(x.shape))
        return x + self.mlp(x)


class TinyGPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos = nn.Embedding(cfg.seq_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)

    @classmethod
    def from_preset(cls, preset: str, *, seed: int = 0, device: str | torch.device = "cpu",
                    dtype: torch.dtype = torch.float32, **overrides: int) -> "TinyGPT":
        return cls.from_config(config(preset, **overrides), seed=seed, device=device, dtype=dtype)

    @classmethod
    def from_config(cls, cfg: GPTConfig, *, seed: int = 0, device: str | torch.device = "cpu",
                    dtype: torch.dtype = torch.float32) -> "TinyGPT":
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = cls(cfg)
            model.apply(_init_weights)
            # GPT-2's scaled init of residual projections keeps the residual stream's variance flat.
            for block in model.blocks:
                for lin in (block.proj, block.out):
                    nn.init.normal_(lin.weight, std=0.02 / math.sqrt(2 * cfg.n_layers))
        return model.to(device=device, dtype=dtype)

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(self.ln_f(x), self.tok.weight)  # tied output layer

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [B, T] -> logits [B, T, vocab]."""
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tok(tokens) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        return self._logits(x)

    def loss(self, tokens: torch.Tensor) -> torch.Tensor:
        """Next-token cross-entropy on tokens [B, T+1]; computed in fp32 (autocast does so too)."""
        logits = self(tokens[:, :-1])
        return F.cross_entropy(logits.float().flatten(0, 1), tokens[:, 1:].flatten())

    def new_cache(self, batch: int = 1, dtype: torch.dtype | None = None) -> list[torch.Tensor]:
        """Static KV cache: one [2, B, H, seq_len, Dh] tensor per layer, zero-filled."""
        p = self.tok.weight
        shape = (2, batch, self.cfg.n_heads, self.cfg.seq_len, self.cfg.head_dim)
        return [torch.zeros(shape, dtype=dtype or p.dtype, device=p.device) for _ in self.blocks]

    @torch.no_grad()
    def decode(self, token: torch.Tensor, pos: torch.Tensor, cache: list[torch.Tensor]) -> torch.Tensor:
        """One decode step: token [B] at position pos ([1] int64 tensor) -> logits [B, vocab]."""
        x = self.tok(token)[:, None] + self.pos(pos)[None]
        for block, kv in zip(self.blocks, cache):
            x = block.decode(x, pos, kv[0], kv[1])
        return self._logits(x)[:, 0]


def _init_weights(m: nn.Module) -> None:
    if isinstance(m, nn.Linear):
        nn.init.normal_(m.weight, std=0.02)
        nn.init.zeros_(m.bias)
    elif isinstance(m, nn.Embedding):
        nn.init.normal_(m.weight, std=0.02)


def markov_tokens(vocab: int, n_tokens: int, *, seed: int = 0, branching: int = 4) -> torch.Tensor:
    """A token stream from a seeded random Markov chain in which each token has `branching` likely
    successors. Its entropy (about log(branching)) is what a good model's loss approaches."""
    if branching < 1 or branching > vocab:
        raise ValueError(f"branching must be in [1, vocab={vocab}], got {branching}")
    g = torch.Generator().manual_seed(seed)
    successors = torch.randint(vocab, (vocab, branching), generator=g)  # repeats are harmless
    choice = torch.randint(branching, (n_tokens,), generator=g)
    tok = int(torch.randint(vocab, (1,), generator=g))
    succ, out = successors.tolist(), []
    for c in choice.tolist():
        out.append(tok)
        tok = succ[tok][c]
    return torch.tensor(out, dtype=torch.long)


def batches(stream: torch.Tensor, batch: int, seq_len: int, steps: int, *, seed: int = 0,
            device: str | torch.device = "cpu") -> list[torch.Tensor]:
    """`steps` batches of random windows [batch, seq_len + 1] from the stream (inputs and targets)."""
    g = torch.Generator().manual_seed(seed)
    starts = torch.randint(len(stream) - seq_len - 1, (steps, batch), generator=g)
    idx = starts[..., None] + torch.arange(seq_len + 1)
    return list(stream[idx].to(device).unbind(0))
