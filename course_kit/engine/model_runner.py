"""Turns a scheduled step into tensors, runs the model over the paged cache, samples tokens.

Two ways to lay out a step, picked once per runner:
- split (CPU default): decodes first, then prefill chunks; attention treats the first rows as
  one-query decodes and runs SDPA per prefilling sequence (attention/engine_step.py);
- varlen (CUDA default): one Triton kernel over query tiles handles decodes and prefill chunks
  alike, so a mixed step has static shapes once its token count is rounded up to a bucket.

Padding rows write into a scratch block that no request owns. Finished members of a static batch
still read their whole cache (a padded batch computes them in full); rows that only round a batch
up to a captured size read the scratch block alone. On CUDA, every step whose padded shape was
captured replays a CUDA graph: one per decode batch size, and one per token bucket for mixed
decode + prefill steps (notebook 05's static buffers, applied to the paged cache).
"""
from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass

import numpy as np
import torch

from ..attention.registry import triton_kernels
from ..attention.engine_step import EngineBatch, engine_attention
from ..attention.paged import TILE_M
from ..models import llama, sampling
from .block_manager import BlockManager
from .config import EngineConfig
from .scheduler import Scheduled, SchedulerOutput

def fuse_around_attention(model: llama.Transformer, backend: str | None = "inductor") -> None:
    """Compile the two halves of every block around attention (norms, projections, RoPE, SwiGLU,
    residuals) so that each becomes a few fused kernels; backend=None undoes it.

    A decode step of a small model is hundreds of tiny element-wise kernels (RMSNorm alone is
    five), and a CUDA graph replays every one of them. Attention stays outside (its Triton kernel
    reads the paged cache), so the compiled code holds plain tensors only. One compiled function
    with dynamic shapes serves every layer and every batch size: the compile happens once.
    """
    for layer in model.layers:
        for name in ("attention_inputs", "attention_outputs"):
            layer.__dict__.pop(name, None)          # back to the plain methods
    if backend is None:
        return
    for name in ("attention_inputs", "attention_outputs"):
        compiled = _compiled_half(name, backend)
        for layer in model.layers:
            setattr(layer, name, functools.partial(compiled, layer))


@functools.lru_cache(maxsize=None)
def _compiled_half(name: str, backend: str):
    cfg = torch._dynamo.config      # a few entries: batch size 1 is specialised, prefill vs decode
    cfg.cache_size_limit = max(cfg.cache_size_limit, 16)
    return torch.compile(getattr(llama.Block, name), dynamic=True, backend=backend)


_NUMPY = {torch.int64: np.int64, torch.int32: np.int32}

GRAPH_SIZES = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 224, 256, 320, 384, 448, 512)
TOKEN_BUCKETS = (128, 256, 512, 1024, 2048, 4096, 8192)


@dataclass
class StepInputs:
    batch: EngineBatch
    order: list[Scheduled]         # the scheduled items, in row order
    rows: list[int]                # logits row of each item in `order`
    num_rows: int                  # rows computed, padding included
    graph: tuple[str, int] | None = None   # ("decode", batch size) or ("mixed", tokens) when replayed
    host: dict | None = None       # the host lists the batch was built from (for graph replay)

    def in_schedule_order(self, tokens: list[int | None], scheduled: list[Scheduled]) -> list[int | None]:
        """`tokens` (one per item of `order`, as `ModelRunner.sample` returns them) rearranged to
        follow `scheduled`, the scheduler's order. The two differ whenever a one-token chunk comes
        after a longer one in the schedule (e.g. a prefill chunk cut to the last token of budget):
        `order` puts every one-token row first."""
        if len(tokens) != len(self.order):
            raise ValueError(f"{len(tokens)} tokens for the {len(self.order)} items of the step")
        by_item = {id(item): t for item, t in zip(self.order, tokens)}
        missing = [s.seq.request_id for s in scheduled if id(s) not in by_item]
        if missing or len(scheduled) != len(self.order):
            raise ValueError(f"{len(scheduled)} scheduled items for the {len(self.order)} of the step "
                             f"(not in the step: {missing[:5]})")
        return [by_item[id(s)] for s in scheduled]


class ModelRunner:
    def __init__(self, model: llama.Transformer, config: EngineConfig) -> None:
        config = config.resolved(model.config.max_seq_len, next(model.parameters()).device)
        self.config = config
        num_blocks, block_size, max_num_seqs = config.num_blocks, config.block_size, config.max_num_seqs
        cuda_graphs, varlen, fuse = config.cuda_graphs, config.varlen, config.fuse
        max_num_batched_tokens = config.max_num_batched_tokens
        self.model = model
        p = next(model.parameters())
        self.device, self.dtype = p.device, p.dtype
        # one extra block at the end is the scratch block for padding rows
        self.cache = llama.PagedKVCache(model.config, num_blocks + 1, block_size, self.dtype, self.device)
        self.scratch_block = num_blocks
        self._scratch_table = np.array([num_blocks], dtype=np.int32)
        self.block_size = block_size
        self.max_blocks_per_seq = config.max_blocks_per_seq
        self.max_num_seqs = max_num_seqs
        on_cuda = self.device.type == "cuda"
        if cuda_graphs and not on_cuda:
            raise ValueError("cuda_graphs=True needs the model on a CUDA device")
        self.triton = triton_kernels(self.device)
        self.varlen, self.use_graphs = varlen, cuda_graphs
        # mixed steps hold at most the token budget plus one token per other row, plus a pad row
        self.mixed_rows = max_num_seqs + 1
        top = max_num_batched_tokens + self.mixed_rows
        self.token_buckets = [b for b in TOKEN_BUCKETS if self.mixed_rows < b < top] + [top]
        # pad steps to the captured shapes; tests turn this on without CUDA to check the layout
        self.pad_shapes = self.use_graphs
        self.graphs: dict[tuple[str, int], torch.cuda.CUDAGraph] = {}
        self._pin = on_cuda
        # fused blocks (default on a GPU with Triton): Inductor compiles them at the first step
        self.fused = _fuse(model, fuse)

    # ---- inputs -------------------------------------------------------------------------
    def decode_sizes(self) -> list[int]:
        return sorted({g for g in GRAPH_SIZES if g < self.max_num_seqs} | {self.max_num_seqs})

    def prepare(self, out: SchedulerOutput, blocks: BlockManager) -> StepInputs:
        """The step's inputs on the device, block tables read from `blocks`."""
        ones = [s for s in out.scheduled if s.num_tokens == 1]
        many = [s for s in out.scheduled if s.num_tokens > 1]
        order = ones + many
        rows = [self._row(s, blocks.table_array(s.seq.request_id)) for s in order]
        graph = None
        if not many:
            n = len(ones) + out.num_padding_rows
            if self.pad_shapes:
                size = next((g for g in self.decode_sizes() if g >= n), None)
                if size is not None:
                    graph, n = ("decode", size), size
            pads = [self._padding_row(s, blocks) for s in out.padding]
            rows += pads + [self._pad_row(1)] * (n - len(ones) - len(pads))
        else:
            assert out.num_padding_rows == 0, "padding rows only ride along in decode steps"
            real = sum(len(r[1]) for r in rows)
            if self.varlen and self.pad_shapes and len(rows) < self.mixed_rows:
                need = real + self.mixed_rows - len(rows)
                bucket = next((b for b in self.token_buckets if b >= need), None)
                if bucket is not None:
                    graph = ("mixed", bucket)
                    pads = self.mixed_rows - len(rows)
                    rows += [self._pad_row(1)] * (pads - 1) + [self._pad_row(bucket - real - (pads - 1))]
        host = self._flatten(rows, tiles=self.varlen and bool(many))
        batch = self._to_device(host, num_decode=len(ones) if many else len(rows))
        if many and not self.varlen:
            qs = host["qstart"]
            for i in range(len(ones), len(order)):
                batch.prefills.append((i, qs[i], qs[i + 1], rows[i][3]))
        return StepInputs(batch, order, list(range(len(order))), len(rows), graph, host)

    # A row is (tokens, positions, cache slots, context length, block table). Decode rows (one
    # token) stay Python scalars; longer rows are numpy arrays, so a 1,000-token prefill chunk
    # costs a few vector operations on the host rather than a few thousand Python ones.
    def _row(self, item: Scheduled, table: np.ndarray) -> tuple:
        seq, n = item.seq, item.num_tokens
        start, bs = seq.num_computed, self.block_size
        if n == 1:
            return seq.token_slice(start, 1), [start], [int(table[start // bs]) * bs + start % bs], start + 1, table
        pos = np.arange(start, start + n)
        return seq.token_slice(start, n), pos, table[pos // bs].astype(np.int64) * bs + pos % bs, start + n, table

    def _padding_row(self, seq, blocks: BlockManager) -> tuple:
        """A finished member of a static batch: it attends over its whole cache, as a padded batch
        computes it, and writes its K/V into the scratch block (its output is thrown away)."""
        if not blocks.tables.get(seq.request_id) or seq.num_computed < 1:     # aborted: its cache is gone
            return self._pad_row(1)
        ctx = seq.num_computed
        return [0], [ctx - 1], [self.scratch_block * self.block_size], ctx, blocks.table_array(seq.request_id)

    def _pad_row(self, n: int) -> tuple:
        """n tokens at position 0 in the scratch block: they attend only to themselves."""
        return [0] * n, [0] * n, [self.scratch_block * self.block_size] * n, 1, self._scratch_table

    def _flatten(self, rows: list[tuple], tiles: bool) -> dict:
        qstart = [0]
        for r in rows:
            qstart.append(qstart[-1] + len(r[1]))
        if qstart[-1] == len(rows):          # one token per row: a decode step
            tokens, positions, slots = ([r[k][0] for r in rows] for k in range(3))
        else:
            tokens, positions, slots = (np.concatenate([np.asarray(r[k], dtype=np.int64) for r in rows])
                                        for k in range(3))
        tile_row, tile_start, tile_len = [], [], []
        if tiles:
            for r, row in enumerate(rows):
                if row[4] is self._scratch_table:      # pad rows need no tiles
                    continue
                lo, hi = qstart[r], qstart[r + 1]
                for t in range(lo, hi, TILE_M):
                    tile_row.append(r)
                    tile_start.append(t)
                    tile_len.append(min(TILE_M, hi - t))
        width = max(len(r[4]) for r in rows)
        table = np.full((len(rows), width), -1, dtype=np.int32)
        for i, r in enumerate(rows):
            table[i, :len(r[4])] = r[4]
        return {"tokens": tokens, "positions": positions, "slots": slots, "qstart": qstart,
                "ctx": [r[3] for r in rows], "tables": table, "tiles": (tile_row, tile_start, tile_len)}

    def _tensor(self, x, dtype: torch.dtype) -> torch.Tensor:
        # via numpy: torch.tensor() on a Python list is several times slower
        t = torch.from_numpy(np.asarray(x, dtype=_NUMPY[dtype]))
        if self._pin:
            t = t.pin_memory()
        return t.to(self.device, non_blocking=True)

    def _to_device(self, h: dict, num_decode: int) -> EngineBatch:
        mixed = num_decode < len(h["ctx"])
        tiles = tuple(self._tensor(x, torch.int32) for x in h["tiles"]) if self.varlen and mixed else None
        qs = h["qstart"]
        return EngineBatch(
            tokens=self._tensor(h["tokens"], torch.int64), positions=self._tensor(h["positions"], torch.int64),
            slot_mapping=self._tensor(h["slots"], torch.int64), query_start=self._tensor(qs, torch.int32),
            context_lens=self._tensor(h["ctx"], torch.int32), block_tables=self._tensor(h["tables"], torch.int32),
            max_query_len=max(b - a for a, b in zip(qs, qs[1:])), num_decode=num_decode, prefills=[],
            tiles=tiles, triton_decode=self.triton)

    # ---- model --------------------------------------------------------------------------
    @torch.inference_mode()
    def run(self, inputs: StepInputs) -> torch.Tensor:
        """Logits [rows, V] of the step (graph replay where the padded shape was captured)."""
        if inputs.graph is not None and self.use_graphs:
            return self._replay(inputs)
        return self.model.forward_paged(inputs.batch, self.cache, attention=engine_attention)

    def sample(self, logits: torch.Tensor, inputs: StepInputs) -> list[int | None]:
        """One token per item that samples (None for mid-prefill chunks). One host sync."""
        picked = logits[:len(inputs.order)]
        toks = picked.argmax(dim=-1)
        for i, item in enumerate(inputs.order):
            p = item.seq.params
            if p.greedy or not item.sample:
                continue
            if p.seed is not None and item.seq.generator is None:
                item.seq.generator = torch.Generator(device=logits.device).manual_seed(p.seed)
            toks[i] = sampling.sample(picked[i:i + 1], p.temperature, p.top_k, p.top_p, item.seq.generator)[0]
        values = toks.tolist()
        return [v if item.sample else None for v, item in zip(values, inputs.order)]

    # ---- CUDA graphs --------------------------------------------------------------------
    @torch.inference_mode()
    def capture(self) -> None:
        """Capture a decode step per padded batch size and (varlen) a mixed step per token bucket,
        largest first so that they share one memory pool."""
        if not self.use_graphs or self.graphs:
            return
        self._alloc_buffers()
        dev, R = self.device, self.mixed_rows
        keys = [("decode", s) for s in self.decode_sizes()]
        if self.varlen:
            keys += [("mixed", b) for b in self.token_buckets]
        self._out: dict[tuple[str, int], torch.Tensor] = {}
        pool, stream = None, torch.cuda.Stream()
        for key in sorted(keys, key=lambda k: -k[1]):
            batch = self._graph_batch(key)
            if key[0] == "mixed":    # a valid layout: R rows of one token, the rest in the last
                self._buf["qstart"][:R + 1].copy_(torch.arange(R + 1, device=dev).clamp(max=key[1]))
                self._buf["qstart"][R] = key[1]
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(2):                   # warm-up: Triton compiles, allocator settles
                    self.model.forward_paged(batch, self.cache, attention=engine_attention)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                self._out[key] = self.model.forward_paged(batch, self.cache, attention=engine_attention)
            pool = graph.pool()
            self.graphs[key] = graph
            self._buf["qstart"].copy_(torch.arange(R + 1, dtype=torch.int32, device=dev))
        torch.cuda.synchronize()

    def _alloc_buffers(self) -> None:
        """The static input buffers every captured step reads (views of them, per shape)."""
        R = max(self.max_num_seqs, self.mixed_rows)
        T = max(self.token_buckets) if self.varlen else self.max_num_seqs
        W, dev = self.max_blocks_per_seq, self.device
        max_tiles = T // TILE_M + R
        scratch_slot = self.scratch_block * self.block_size
        self._buf = {
            "tokens": torch.zeros(T, dtype=torch.int64, device=dev),
            "positions": torch.zeros(T, dtype=torch.int64, device=dev),
            "slots": torch.full((T,), scratch_slot, dtype=torch.int64, device=dev),
            "qstart": torch.arange(R + 1, dtype=torch.int32, device=dev),
            "ctx": torch.ones(R, dtype=torch.int32, device=dev),
            "tables": torch.full((R, W), self.scratch_block, dtype=torch.int32, device=dev),
            "tile_row": torch.full((max_tiles,), -1, dtype=torch.int32, device=dev),
            "tile_start": torch.zeros(max_tiles, dtype=torch.int32, device=dev),
            "tile_len": torch.zeros(max_tiles, dtype=torch.int32, device=dev),
        }

    def _graph_batch(self, key: tuple[str, int]) -> EngineBatch:
        b = self._buf
        kind, n = key
        if kind == "decode":
            return EngineBatch(tokens=b["tokens"][:n], positions=b["positions"][:n], slot_mapping=b["slots"][:n],
                               query_start=b["qstart"][:n + 1], context_lens=b["ctx"][:n],
                               block_tables=b["tables"][:n], max_query_len=1, num_decode=n, prefills=[],
                               triton_decode=self.triton)
        R, tiles = self.mixed_rows, n // TILE_M + self.mixed_rows
        return EngineBatch(tokens=b["tokens"][:n], positions=b["positions"][:n], slot_mapping=b["slots"][:n],
                           query_start=b["qstart"][:R + 1], context_lens=b["ctx"][:R],
                           block_tables=b["tables"][:R], max_query_len=n, num_decode=0, prefills=[],
                           tiles=(b["tile_row"][:tiles], b["tile_start"][:tiles], b["tile_len"][:tiles]))

    def _replay(self, inputs: StepInputs) -> torch.Tensor:
        if not self.graphs:
            self.capture()
        key, batch, b = inputs.graph, inputs.batch, self._buf
        n = batch.tokens.shape[0]
        rows = batch.context_lens.shape[0]
        b["tokens"][:n].copy_(batch.tokens, non_blocking=True)
        b["positions"][:n].copy_(batch.positions, non_blocking=True)
        b["slots"][:n].copy_(batch.slot_mapping, non_blocking=True)
        b["ctx"][:rows].copy_(batch.context_lens, non_blocking=True)
        w = batch.block_tables.shape[1]
        b["tables"][:rows, :w].copy_(batch.block_tables, non_blocking=True)
        if key[0] == "mixed":
            b["qstart"][:rows + 1].copy_(batch.query_start, non_blocking=True)
            k = batch.tiles[0].shape[0]
            b["tile_row"].fill_(-1)
            for name, t in zip(("tile_row", "tile_start", "tile_len"), batch.tiles):
                b[name][:k].copy_(t, non_blocking=True)
        self.graphs[key].replay()
        if key[0] == "mixed":     # the next decode graph expects one token per row again
            b["qstart"].copy_(torch.arange(b["qstart"].shape[0], dtype=torch.int32, device=self.device))
        return self._out[key]


def _fuse(model: llama.Transformer, fuse: bool | str) -> bool:
    backend = fuse if isinstance(fuse, str) else ("inductor" if fuse else None)
    try:
        fuse_around_attention(model, backend)
        return backend is not None
    except Exception as err:  # noqa: BLE001 - an engine without fused blocks still runs
        warnings.warn(f"running unfused blocks: torch.compile is unavailable ({err})", stacklevel=3)
        fuse_around_attention(model, None)
        return False
