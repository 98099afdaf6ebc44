"""The paged KV cache's bookkeeping: fixed-size blocks, a block table per request, reference counts.

The cache itself (`llama.PagedKVCache`) is one big tensor of `num_blocks` blocks of `block_size`
token slots. This class decides which blocks each request owns. A request's token at position p
lives in slot `table[p // block_size] * block_size + p % block_size`.

With `prefix_caching=True`, full blocks are named by a hash of all the tokens up to their end
(`block_hash`, chained through the previous block's hash), so two requests with the same prefix
share those blocks (the reference count says by how many). A hash names a block, it does not prove
it: a hit is taken only when the block's own tokens are those asked for, so two prefixes whose
hashes collide never share K/V (vLLM keeps the token ids in its hash key; nano-vllm compares them).
A freed block keeps its hash until it is handed out again, so a later request can still reuse it.
Only full, already computed blocks are shared; a request always writes into a private last block,
so no copy-on-write is needed.
"""
from __future__ import annotations

from collections import OrderedDict

import numpy as np

from .sequence import Sequence


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def block_hash(previous: int | None, tokens: tuple[int, ...]) -> int:
    """The name of a full block: its tokens and, through `previous`, every token before them."""
    return hash((previous, tokens))


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, prefix_caching: bool = False) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks={num_blocks} must be >= 1")
        if block_size < 1:
            raise ValueError(f"block_size={block_size} must be >= 1")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.prefix_caching = prefix_caching
        self.ref_count = [0] * num_blocks
        self._free: OrderedDict[int, None] = OrderedDict((b, None) for b in range(num_blocks))
        self.tables: dict[str, list[int]] = {}
        self._arrays: dict[str, np.ndarray] = {}      # tables as int32 arrays (table_array)
        self._hash_to_block: dict[int, int] = {}
        self._block_to_hash: dict[int, int] = {}
        self._seq_hashes: dict[str, list[int]] = {}
        self._block_tokens: dict[int, tuple[int, ...]] = {}   # a named block's own tokens (hits check them)
        self.prefix_hits = 0          # blocks reused from the prefix cache (a statistic)

    # ---- queries -------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self._free)

    def block_table(self, seq_id: str) -> list[int]:
        return self.tables.get(seq_id, [])

    def table_array(self, seq_id: str) -> np.ndarray:
        """The block table as an int32 array, rebuilt only when the table has grown: the model
        runner reads every row's table every step, and converting lists each time costs more
        host time than a small model's whole decode step on the GPU."""
        table, arr = self.tables[seq_id], self._arrays.get(seq_id)
        if arr is None or len(arr) != len(table):      # tables only grow until they are freed
            arr = self._arrays[seq_id] = np.asarray(table, dtype=np.int32)
        return arr

    def slot(self, seq_id: str, position: int) -> int:
        table = self.tables[seq_id]
        return table[position // self.block_size] * self.block_size + position % self.block_size

    def _prefix_hits(self, seq: Sequence) -> list[int]:
        """Cached blocks matching the start of `seq.tokens`. Never the block holding the last
        token: its logits are needed, so at least one token is always computed."""
        if not self.prefix_caching:
            return []
        tokens = seq.tokens
        hits, h = [], None
        for i in range((len(tokens) - 1) // self.block_size):
            chunk = tuple(tokens[i * self.block_size:(i + 1) * self.block_size])
            h = block_hash(h, chunk)
            block = self._hash_to_block.get(h)
            # the chain of hits starts at block 0, so checking each block's own tokens checks all
            if block is None or self._block_tokens.get(block) != chunk:
                break
            hits.append(block)
        return hits

    def cached_prefix(self, seq: Sequence) -> tuple[int, int]:
        """For a request that holds no blocks yet: (tokens already in the cache, blocks of those
        that running requests hold). Held blocks cost it no free block; a cached block nobody
        holds is taken off the free list like a new one. What `scheduler.admit` reads."""
        hits = self._prefix_hits(seq)
        return len(hits) * self.block_size, sum(1 for b in hits if self.ref_count[b] > 0)

    def blocks_needed(self, seq: Sequence, num_tokens: int) -> int:
        """Free blocks that `seq` must take so that it can hold `num_tokens` tokens."""
        table = self.tables.get(seq.request_id)
        if table:
            return max(0, _cdiv(num_tokens, self.block_size) - len(table))
        hits = self._prefix_hits(seq)
        # a hit on a block nobody holds still takes it off the free list
        in_use = sum(1 for b in hits if self.ref_count[b] > 0)
        return _cdiv(num_tokens, self.block_size) - in_use

    def can_allocate(self, seq: Sequence, num_tokens: int) -> bool:
        return self.blocks_needed(seq, num_tokens) <= self.num_free_blocks

    # ---- changes -------------------------------------------------------------------------
    def _take_free(self) -> int:
        block, _ = self._free.popitem(last=False)       # the least recently freed block
        old = self._block_to_hash.pop(block, None)
        self._block_tokens.pop(block, None)
        if old is not None and self._hash_to_block.get(old) == block:
            del self._hash_to_block[old]
        return block

    def allocate(self, seq: Sequence, num_tokens: int) -> int:
        """Give a request with no blocks enough of them for `num_tokens` tokens.
        Returns how many leading tokens are already in the cache (prefix hits)."""
        if self.tables.get(seq.request_id):
            raise ValueError(f"request {seq.request_id!r} already holds blocks; use grow()")
        need = self.blocks_needed(seq, num_tokens)
        if need > self.num_free_blocks:
            raise RuntimeError(f"request {seq.request_id!r} needs {need} blocks, only "
                               f"{self.num_free_blocks} free; check can_allocate() first")
        hits = self._prefix_hits(seq)
        table = []
        for block in hits:
            if self.ref_count[block] == 0:
                del self._free[block]
            self.ref_count[block] += 1
            table.append(block)
        self.prefix_hits += len(hits)
        self.tables[seq.request_id] = table
        self._seq_hashes[seq.request_id] = [self._block_to_hash[b] for b in hits]
        self.grow(seq, num_tokens)
        return len(hits) * self.block_size

    def grow(self, seq: Sequence, num_tokens: int) -> None:
        """Add blocks to a request's table until it holds `num_tokens` tokens."""
        table = self.tables.setdefault(seq.request_id, [])
        missing = _cdiv(num_tokens, self.block_size) - len(table)
        if missing > self.num_free_blocks:
            raise RuntimeError(f"request {seq.request_id!r} needs {missing} more blocks, only "
                               f"{self.num_free_blocks} free")
        for _ in range(missing):
            block = self._take_free()
            self.ref_count[block] = 1
            table.append(block)

    def commit(self, seq: Sequence) -> None:
        """Name the request's full, computed blocks so later requests can share them."""
        if not self.prefix_caching:
            return
        table, hashes = self.tables.get(seq.request_id, []), self._seq_hashes.setdefault(seq.request_id, [])
        full = min(seq.num_computed // self.block_size, len(table))
        tokens = seq.tokens
        while len(hashes) < full:
            i = len(hashes)
            chunk = tuple(tokens[i * self.block_size:(i + 1) * self.block_size])
            h = block_hash(hashes[-1] if hashes else None, chunk)
            hashes.append(h)
            block = table[i]
            if h not in self._hash_to_block and block not in self._block_to_hash:
                self._hash_to_block[h] = block
                self._block_to_hash[block] = h
                self._block_tokens[block] = chunk

    def free(self, seq: Sequence) -> None:
        """Release a request's blocks (finished, aborted or preempted)."""
        table = self.tables.pop(seq.request_id, [])
        self._arrays.pop(seq.request_id, None)
        self._seq_hashes.pop(seq.request_id, None)
        # freed in reverse so that a prompt's first blocks are reused last (they are likelier
        # to be shared again)
        for block in reversed(table):
            self.ref_count[block] -= 1
            if self.ref_count[block] == 0:
                self._free[block] = None

    # ---- checks --------------------------------------------------------------------------
    def check_invariants(self) -> None:
        """Raise AssertionError if a block is leaked, owned twice, or counted wrong."""
        owners = [0] * self.num_blocks
        for seq_id, table in self.tables.items():
            assert len(set(table)) == len(table), f"request {seq_id!r} holds a block twice: {table}"
            for b in table:
                assert 0 <= b < self.num_blocks, f"request {seq_id!r} holds block {b} out of range"
                owners[b] += 1
        for b in range(self.num_blocks):
            assert owners[b] == self.ref_count[b], (
                f"block {b}: reference count {self.ref_count[b]} but {owners[b]} tables hold it "
                f"(a leak or a double free)")
            if not self.prefix_caching:
                assert owners[b] <= 1, f"block {b} owned by {owners[b]} requests without prefix caching"
            free = b in self._free
            assert free == (owners[b] == 0), (
                f"block {b}: {'free' if free else 'not free'} with {owners[b]} owners (leak or double use)")
        for h, b in self._hash_to_block.items():
            assert self._block_to_hash.get(b) == h, f"prefix cache maps hash to block {b} inconsistently"
