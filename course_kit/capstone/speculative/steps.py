"""A forward pass over M new tokens of ONE sequence on a static cache: the draft's step and the
target's verify step.

`model.decode(tokens[B], positions[B], cache)` runs one token for each of B sequences, row b in
cache row b. Verifying k draft tokens needs the other shape: k + 1 tokens of the same sequence, at
positions P..P+k, each attending to the cache up to its own position. Both steps here get it from
the batch-1 decode path with one change: every row reads and writes cache row 0. Token m writes its
K/V at positions[m], then attends to positions 0..positions[m], so the M rows see each other
causally, and nothing else changes: at batch 1 the weights are read once whether M is 1 or 8,
which is why verifying k tokens costs about one step.

- `TorchRows`: the model's own layers, with an attention that writes cache row 0 at the M positions
  and reads it through a stride-0 view (no copy).
- `TritonRows`: notebook 05's `TritonDecodeStep` (a few fused Triton kernels a layer) handed the
  same cache row M times as a stride-0 view and a block table of zeros: its K/V append writes every
  row into row 0 at its own position, its attention reads row 0 up to each row's position. At most
  `gemv.MAX_ROWS` (8) tokens: k <= 7.

Both have `model.decode`'s signature and are static-shape and sync-free for a fixed M, so each can
be captured in a CUDA graph. Rows past the accepted ones leave K/V behind at later positions: they
are never read (attention stops at each row's position) and the next round writes over them first
(`decoder.py` says why, and can scrub them).
"""
from __future__ import annotations

from functools import partial

import torch

from ...models import llama


def _rows_attend(q, k, v, *, k_cache, v_cache, positions, fn, scale):
    """q [M, H, D], k/v [M, n_kv, D] of one sequence; the cache [1, n_kv, S, D] (row 0)."""
    k_cache[0, :, positions] = k.transpose(0, 1)      # index_put: token m at positions[m]
    v_cache[0, :, positions] = v.transpose(0, 1)
    M = q.shape[0]
    view = (M, *k_cache.shape[1:])
    return fn(q, k_cache[:1].expand(view), v_cache[:1].expand(view), positions, scale)


class TorchRows:
    """(tokens [M], positions [M], cache) -> logits [M, V], all M tokens in cache row 0."""
    kernels = "torch"

    def __init__(self, model: llama.Transformer):
        self.model = model

    @torch.no_grad()
    def __call__(self, tokens: torch.Tensor, positions: torch.Tensor, cache: llama.StaticKVCache) -> torch.Tensor:
        m = self.model
        h = m._run_layers(tokens, positions, lambda i: partial(
            _rows_attend, k_cache=cache.k[i], v_cache=cache.v[i], positions=positions,
            fn=m.decode_attention, scale=m.scale))
        return m.logits(h)

    def greedy(self, logits: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        return out.copy_(logits.argmax(-1))


class _RowView:
    """A static cache's row 0 seen as M rows (stride 0): k, v [L, M, n_kv, S, D], no copy."""

    def __init__(self, cache: llama.StaticKVCache, m: int):
        L, _, n_kv, S, D = cache.k.shape
        self.k = cache.k[:, :1].expand(L, m, n_kv, S, D)
        self.v = cache.v[:, :1].expand(L, m, n_kv, S, D)


def triton_rows(model: llama.Transformer, pdl: bool | None = None):
    """A `TritonRows` for `model` (imports Triton's kernels only when asked for)."""
    from ...cuda_graphs.decode_kernels.gemv import MAX_ROWS
    from ...cuda_graphs.decode_kernels.step import TritonDecodeStep

    class TritonRows(TritonDecodeStep):
        """TritonDecodeStep over M tokens of one sequence: cache row 0 viewed M times, a zero block table."""
        kernels = "triton"
        max_rows = MAX_ROWS

        def __init__(self, model, pdl=None):
            super().__init__(model, pdl=pdl)
            self._views: dict[tuple[int, int], _RowView] = {}

        def _table(self, b: int) -> torch.Tensor:
            if b not in self._tables:       # every row's one block is block 0: cache row 0
                self._tables[b] = torch.zeros(b, 1, dtype=torch.int32, device=self.device)
            return self._tables[b]

        @torch.no_grad()
        def __call__(self, tokens, positions, cache):
            m = tokens.shape[0]
            if not 1 <= m <= MAX_ROWS:
                raise ValueError(f"the Triton step takes 1 to {MAX_ROWS} tokens, got {m} (k <= {MAX_ROWS - 1})")
            key = (id(cache), m)
            if key not in self._views:      # made once per shape, before capture
                self._views[key] = _RowView(cache, m)
            return super().__call__(tokens, positions, self._views[key])

        def greedy(self, logits, out):
            return super().greedy(logits, out=out)

    return TritonRows(model, pdl=pdl)


KERNELS = ("torch", "triton")


def rows_step(model: llama.Transformer, kernels: str = "torch", pdl: bool | None = None):
    """The M-token step of `model`: "torch" (its own layers) or "triton" (notebook 05's kernels)."""
    if kernels not in KERNELS:
        raise ValueError(f"kernels must be one of {KERNELS}, got {kernels!r}")
    return TorchRows(model) if kernels == "torch" else triton_rows(model, pdl)
