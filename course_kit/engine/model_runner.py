"""Turns a scheduled step into tensors, runs the model over the paged cache, samples tokens.

Rows are laid out decodes first, then padding rows, then prefill chunks, so attention can treat
the first `num_decode` rows as one-query decodes (see paged_attention.py). Padding rows (finished
members of a static batch, or rows that round a batch up to a captured CUDA-graph size) read and
write a scratch block that no request owns.

On CUDA, decode-only steps replay a CUDA graph captured once per padded batch size, with static
buffers for tokens, positions, slots and block tables (notebook 05's idea, applied to the paged
cache): one launch instead of hundreds.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..models import llama, sampling
from .paged_attention import EngineBatch, engine_attention
from .scheduler import Scheduled, SchedulerOutput

GRAPH_SIZES = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 224, 256, 320, 384, 448, 512)


@dataclass
class StepInputs:
    batch: EngineBatch
    order: list[Scheduled]        # the scheduled items, in row order
    rows: list[int]               # logits row of each item in `order`
    num_rows: int                 # rows computed, padding included
    graph_size: int | None = None # captured batch size used, if any


class ModelRunner:
    def __init__(self, model: llama.Transformer, num_blocks: int, block_size: int,
                 max_blocks_per_seq: int, max_num_seqs: int, cuda_graphs: bool | None = None) -> None:
        self.model = model
        p = next(model.parameters())
        self.device, self.dtype = p.device, p.dtype
        # one extra block at the end is the scratch block for padding rows
        self.cache = llama.PagedKVCache(model.config, num_blocks + 1, block_size, self.dtype, self.device)
        self.scratch_block = num_blocks
        self.block_size = block_size
        self.max_blocks_per_seq = max_blocks_per_seq
        self.max_num_seqs = max_num_seqs
        model.set_attention(paged=engine_attention)
        on_cuda = self.device.type == "cuda"
        if cuda_graphs and not on_cuda:
            raise ValueError("cuda_graphs=True needs the model on a CUDA device")
        self.use_graphs = on_cuda if cuda_graphs is None else cuda_graphs
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self._pin = on_cuda

    # ---- inputs -------------------------------------------------------------------------
    def prepare(self, out: SchedulerOutput, tables: dict[str, list[int]]) -> StepInputs:
        ones = [s for s in out.scheduled if s.num_tokens == 1]
        many = [s for s in out.scheduled if s.num_tokens > 1]
        n_dec = len(ones) + out.num_padding_rows
        graph_size = None
        if self.use_graphs and not many and n_dec <= self.max_num_seqs:
            graph_size = next((g for g in self._graph_sizes() if g >= n_dec), None)
        pad_rows = (graph_size or n_dec) - len(ones)
        tokens, positions, slots, qstart, ctx, table_rows = [], [], [], [0], [], []
        scratch_slot = self.scratch_block * self.block_size
        prefills = []
        order = ones + many
        for i, item in enumerate(order):
            seq, n = item.seq, item.num_tokens
            if i == len(ones):                     # padding rows sit between decodes and prefills
                self._add_padding(pad_rows, tokens, positions, slots, qstart, ctx, table_rows, scratch_slot)
            start = seq.num_computed
            toks = seq.tokens[start:start + n]
            table = tables[seq.request_id]
            lo = len(tokens)
            tokens.extend(toks)
            positions.extend(range(start, start + n))
            slots.extend(table[p // self.block_size] * self.block_size + p % self.block_size
                         for p in range(start, start + n))
            if n > 1:
                prefills.append((len(ctx), lo, lo + n, start + n))
            qstart.append(len(tokens))
            ctx.append(start + n)
            table_rows.append(table)
        if len(order) == len(ones):
            self._add_padding(pad_rows, tokens, positions, slots, qstart, ctx, table_rows, scratch_slot)
        width = max(len(t) for t in table_rows)
        bt = torch.full((len(table_rows), width), -1, dtype=torch.int32)
        for r, t in enumerate(table_rows):
            bt[r, :len(t)] = torch.tensor(t, dtype=torch.int32)
        dev = self.device
        to = lambda x, dt: torch.tensor(x, dtype=dt, pin_memory=self._pin).to(dev, non_blocking=True)  # noqa: E731
        batch = EngineBatch(
            tokens=to(tokens, torch.int64), positions=to(positions, torch.int64),
            slot_mapping=to(slots, torch.int64), query_start=to(qstart, torch.int32),
            context_lens=to(ctx, torch.int32),
            block_tables=(bt.pin_memory() if self._pin else bt).to(dev, non_blocking=True),
            max_query_len=max(s.num_tokens for s in order) if order else 1,
            num_decode=len(ones) + pad_rows, prefills=prefills)
        rows = list(range(len(ones))) + [len(ones) + pad_rows + j for j in range(len(many))]
        return StepInputs(batch, order, rows, len(ctx), graph_size)

    def _add_padding(self, n, tokens, positions, slots, qstart, ctx, table_rows, scratch_slot):
        for _ in range(n):
            tokens.append(0)
            positions.append(0)
            slots.append(scratch_slot)
            qstart.append(len(tokens))
            ctx.append(1)
            table_rows.append([self.scratch_block])

    # ---- model --------------------------------------------------------------------------
    @torch.inference_mode()
    def run(self, inputs: StepInputs) -> torch.Tensor:
        """Logits [rows, V] of the step (graph replay for captured decode sizes)."""
        if inputs.graph_size is not None:
            return self._replay(inputs)
        return self.model.forward_paged(inputs.batch, self.cache)

    def sample(self, logits: torch.Tensor, inputs: StepInputs) -> list[int | None]:
        """One token per item that samples (None for mid-prefill chunks). One host sync."""
        rows = torch.tensor(inputs.rows, device=logits.device)
        picked = logits[rows]
        toks = picked.argmax(dim=-1)
        for i, item in enumerate(inputs.order):
            p = item.seq.params
            if p.greedy or not item.sample:
                continue
            if p.seed is not None and item.seq.generator is None:
                item.seq.generator = torch.Generator(device=logits.device).manual_seed(p.seed)
            toks[i] = sampling.sample(picked[i:i + 1], p.temperature, p.top_k, p.top_p,
                                      item.seq.generator)[0]
        values = toks.tolist()
        return [v if item.sample else None for v, item in zip(values, inputs.order)]

    # ---- CUDA graphs --------------------------------------------------------------------
    def _graph_sizes(self) -> list[int]:
        sizes = [g for g in GRAPH_SIZES if g < self.max_num_seqs] + [self.max_num_seqs]
        return sorted(set(sizes))

    @torch.inference_mode()
    def capture(self) -> None:
        """Capture one decode step per padded batch size, largest first (they share a pool)."""
        if not self.use_graphs or self.graphs:
            return
        n, W, dev = self.max_num_seqs, self.max_blocks_per_seq, self.device
        scratch_slot = self.scratch_block * self.block_size
        self._buf = {
            "tokens": torch.zeros(n, dtype=torch.int64, device=dev),
            "positions": torch.zeros(n, dtype=torch.int64, device=dev),
            "slots": torch.full((n,), scratch_slot, dtype=torch.int64, device=dev),
            "qstart": torch.arange(n + 1, dtype=torch.int32, device=dev),
            "ctx": torch.ones(n, dtype=torch.int32, device=dev),
            "tables": torch.full((n, W), self.scratch_block, dtype=torch.int32, device=dev),
        }
        self._out: dict[int, torch.Tensor] = {}
        pool = None
        stream = torch.cuda.Stream()
        for size in sorted(self._graph_sizes(), reverse=True):
            batch = self._graph_batch(size)
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(2):                   # warm-up: Triton compiles, allocator settles
                    self.model.forward_paged(batch, self.cache)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                self._out[size] = self.model.forward_paged(batch, self.cache)
            pool = graph.pool()
            self.graphs[size] = graph
        torch.cuda.synchronize()

    def _graph_batch(self, size: int) -> EngineBatch:
        b = self._buf
        return EngineBatch(tokens=b["tokens"][:size], positions=b["positions"][:size],
                           slot_mapping=b["slots"][:size], query_start=b["qstart"][:size + 1],
                           context_lens=b["ctx"][:size], block_tables=b["tables"][:size],
                           max_query_len=1, num_decode=size, prefills=[])

    def _replay(self, inputs: StepInputs) -> torch.Tensor:
        if not self.graphs:
            self.capture()
        size, batch, b = inputs.graph_size, inputs.batch, self._buf
        b["tokens"][:size].copy_(batch.tokens, non_blocking=True)
        b["positions"][:size].copy_(batch.positions, non_blocking=True)
        b["slots"][:size].copy_(batch.slot_mapping, non_blocking=True)
        b["ctx"][:size].copy_(batch.context_lens, non_blocking=True)
        w = batch.block_tables.shape[1]
        b["tables"][:size, :w].copy_(batch.block_tables, non_blocking=True)
        self.graphs[size].replay()
        return self._out[size]
