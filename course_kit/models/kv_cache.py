"""KV caches for the course model: where K and V live between steps.

Two layouts:
- `StaticKVCache`: one contiguous [L, B, n_kv, S, D] tensor for K and one for V. Fixed shapes make
  the decode step capturable in a CUDA graph (notebook 05).
- `PagedKVCache`: [L, num_blocks, block_size, n_kv, D]; a sequence owns a list of blocks named by
  its row of a block table, so memory is handed out block by block (notebook 06, the engine).
  `PagedBatch` (defined with the attention that reads it, attention/paged.py) describes one step.

The attention that reads these caches lives in `course_kit.attention` (gqa, paged, engine_step,
paged_triton); the model is handed it through `Transformer.set_attention` (attention/registry.py
documents the signatures).
"""
from __future__ import annotations

import torch

from ..attention.paged import PagedBatch  # noqa: F401  (llama.PagedBatch is part of the model's API)


class StaticKVCache:
    """Contiguous cache: k, v are [n_layers, max_batch, n_kv_heads, max_seq, head_dim]."""

    def __init__(self, cfg, max_batch: int, max_seq: int, dtype: torch.dtype = torch.float32,
                 device: str | torch.device = "cpu"):
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        if not 1 <= max_seq <= cfg.max_seq_len:
            raise ValueError(f"max_seq must be in [1, {cfg.max_seq_len}] (the model's max positions), "
                             f"got {max_seq}")
        shape = (cfg.n_layers, max_batch, cfg.n_kv_heads, max_seq, cfg.head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.max_batch, self.max_seq = max_batch, max_seq

    def nbytes(self) -> int:
        return self.k.numel() * self.k.element_size() * 2


class PagedKVCache:
    """Block-addressed cache: k, v are [n_layers, num_blocks, block_size, n_kv_heads, head_dim]."""

    def __init__(self, cfg, num_blocks: int, block_size: int, dtype: torch.dtype = torch.float32,
                 device: str | torch.device = "cpu"):
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"num_blocks and block_size must be >= 1, got {num_blocks}, {block_size}")
        shape = (cfg.n_layers, num_blocks, block_size, cfg.n_kv_heads, cfg.head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.num_blocks, self.block_size = num_blocks, block_size

    def nbytes(self) -> int:
        return self.k.numel() * self.k.element_size() * 2
