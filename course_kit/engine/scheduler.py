"""Which requests run in the next model step: static, dynamic and continuous batching.

Every policy answers one question per step: which sequences run, and how many new tokens each
feeds the model. A sequence with one uncomputed token is decoding; more than one is prefilling
(its prompt, or prompt + output again after a preemption).

- static: a batch of `max_num_seqs` requests is formed once enough have arrived, padded to the
  longest, and it runs until its last member finishes. Finished members ride along as padding
  rows, the way a padded `generate` keeps computing them: each still attends over its whole cache,
  which the batch holds until its last member is done.
- dynamic: the same, but a batch leaves as soon as it is full or its oldest request has waited
  `max_wait_s`.
- continuous: requests are admitted and retired at every step. Decodes go first, then chunks of
  prefills, all under a budget of `max_num_batched_tokens` new tokens per step. A request is
  admitted only if blocks for all its tokens are free (`admit`, the one rule, which with prefix
  caching counts a request's cached prefix as computed); when a running request needs a block
  and none is free, the newest request is preempted (its blocks freed, recomputed later).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from itertools import repeat
from typing import Iterable, Iterator

from .block_manager import BlockManager
from .config import EngineConfig
from .sequence import Sequence, Status

POLICIES = ("static", "dynamic", "continuous")


def admit(waiting: Iterable[int], free_blocks: int, block_size: int, free_slots: int,
          token_budget: int, prefix_hits: Iterable[tuple[int, int]] | None = None) -> list[int]:
    """The continuous admission rule, first come first served.

    `waiting` holds the token counts of the waiting requests, oldest first. A request is admitted
    if a batch slot is free, some token budget is left, and blocks for *all* its tokens are free
    (so a half-prefilled request never stalls for memory). Its prefill is chunked to the budget
    left. The first request that does not fit stops admission: skipping it would let a stream of
    short requests starve a long one. Returns the prefill chunk of each admitted request, in order.

    With prefix caching, `prefix_hits` gives for each waiting request (tokens already in the
    cache, blocks of those that running requests hold): cached tokens need no compute, and held
    blocks no free block. Both are read lazily, one request at a time, and a request is read
    only once the one before it is admitted (the scheduler relies on this, see `_admit`).
    """
    hits = repeat((0, 0)) if prefix_hits is None else prefix_hits
    chunks: list[int] = []
    for n, (cached, held) in zip(waiting, hits):
        blocks = -(-n // block_size) - held
        if free_slots == 0 or token_budget == 0 or blocks > free_blocks:
            break
        chunk = min(n - cached, token_budget)
        chunks.append(chunk)
        free_slots -= 1
        free_blocks -= blocks
        token_budget -= chunk
    return chunks


@dataclass
class Scheduled:
    seq: Sequence
    num_tokens: int           # new tokens fed this step
    sample: bool              # this chunk reaches the end of the sequence: sample a token


@dataclass
class SchedulerOutput:
    scheduled: list[Scheduled] = field(default_factory=list)
    num_padding_rows: int = 0          # rows computed for nothing (finished members of a batch)
    padding: list[Sequence] = field(default_factory=list)   # those members (their caches are held)
    padding_tokens: int = 0            # tokens a padded batch spends on padding
    preempted: list[Sequence] = field(default_factory=list)
    # K/V positions the step's attention reads: each row's context up to its last new token (a
    # padding row of a static batch still attends its whole cache). What bounds a step's bytes.
    kv_tokens: int = 0

    @property
    def num_tokens(self) -> int:
        return sum(s.num_tokens for s in self.scheduled) + self.num_padding_rows

    @property
    def empty(self) -> bool:
        return not self.scheduled


class Scheduler:
    """Holds the waiting queue and the running set; `schedule()` then `postprocess()` each step."""

    def __init__(self, config: EngineConfig, blocks: BlockManager) -> None:
        policy, max_num_seqs = config.policy, config.max_num_seqs
        max_num_batched_tokens = config.max_num_batched_tokens
        if policy not in POLICIES:
            raise ValueError(f"policy={policy!r}; choose one of {POLICIES}")
        if max_num_seqs < 1:
            raise ValueError(f"max_num_seqs={max_num_seqs} must be >= 1")
        if policy == "continuous" and max_num_batched_tokens < max_num_seqs:
            raise ValueError(f"max_num_batched_tokens={max_num_batched_tokens} must be >= "
                             f"max_num_seqs={max_num_seqs}, so every running decode fits a step")
        self.config = config
        self.blocks = blocks
        self.policy = policy
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_wait_s = config.max_wait_s
        self.max_model_len = config.max_model_len
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []          # in admission order
        self.batch: list[Sequence] = []            # static/dynamic: the members of the batch
        self._free_slots = list(range(max_num_seqs))
        self.num_preemptions = 0

    # ---- queue --------------------------------------------------------------------------
    def capacity(self) -> int:
        """The most tokens (prompt + new) one request may hold: the model's length, and the cache."""
        limit = self.blocks.num_blocks * self.blocks.block_size
        return limit if self.max_model_len is None else min(limit, self.max_model_len)

    def add(self, seq: Sequence) -> None:
        limit = self.capacity()
        if seq.max_total_tokens > limit:
            raise ValueError(f"request {seq.request_id!r}: prompt {len(seq.prompt)} + max_new_tokens "
                             f"{seq.params.max_new_tokens} = {seq.max_total_tokens} tokens, more than "
                             f"the {limit} the engine can hold")
        self.waiting.append(seq)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def abort(self, request_id: str, now: float, reason: str = "abort") -> Sequence | None:
        """Stop a request now (`reason` "abort": a client went away; the async loop also retires
        requests early with "length" or "eos")."""
        for seq in list(self.waiting) + self.running:
            if seq.request_id == request_id:
                if seq.status is Status.WAITING:
                    self.waiting.remove(seq)
                seq.finish_reason = reason
                self._finish(seq, now)
                return seq
        return None

    def _start(self, seq: Sequence) -> None:
        seq.status = Status.RUNNING
        seq.slot = self._free_slots.pop(0)
        self.running.append(seq)

    def _finish(self, seq: Sequence, now: float) -> None:
        if seq.status is Status.RUNNING:
            self.running.remove(seq)
            self._free_slots.append(seq.slot)
            self._free_slots.sort()
        seq.status = Status.FINISHED
        seq.finish_time = now
        if self.policy == "continuous" or seq not in self.batch or seq.finish_reason == "abort":
            self.blocks.free(seq)
        elif all(s.status is Status.FINISHED for s in self.batch):
            # a padded batch keeps every member's cache until its last member is done
            for member in self.batch:
                self.blocks.free(member)

    def _preempt(self, seq: Sequence) -> None:
        """Recompute-style preemption: drop the K/V, requeue at the front."""
        self.running.remove(seq)
        self._free_slots.append(seq.slot)
        self._free_slots.sort()
        self.blocks.free(seq)
        seq.status, seq.slot, seq.num_computed = Status.WAITING, -1, 0
        seq.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(seq)

    # ---- scheduling ---------------------------------------------------------------------
    def schedule(self, now: float, more_coming: bool = False) -> SchedulerOutput:
        """Pick this step's work. `more_coming`: requests will still arrive later (trace replay)."""
        out = self._schedule_continuous() if self.policy == "continuous" else self._schedule_batch(now, more_coming)
        out.kv_tokens = (sum(s.seq.num_computed + s.num_tokens for s in out.scheduled)
                         + sum(s.num_computed + 1 for s in out.padding))
        return out

    def _schedule_batch(self, now: float, more_coming: bool) -> SchedulerOutput:
        out = SchedulerOutput()
        if any(s.status is Status.RUNNING for s in self.batch):
            for seq in self.batch:
                if seq.status is Status.RUNNING:
                    out.scheduled.append(Scheduled(seq, 1, True))
                else:
                    out.num_padding_rows += 1
                    out.padding.append(seq)
            out.padding_tokens = out.num_padding_rows
            return out
        self.batch = []
        if not self.waiting:
            return out
        full = len(self.waiting) >= self.max_num_seqs
        if self.policy == "static":
            ready = full or not more_coming
        else:
            ready = full or not more_coming or now - self.waiting[0].arrival >= self.max_wait_s
        if not ready:
            return out
        # reserve blocks for each member's longest possible length, as a static cache would
        while self.waiting and len(self.batch) < self.max_num_seqs:
            seq = self.waiting[0]
            if not self.blocks.can_allocate(seq, seq.max_total_tokens):
                break
            self.waiting.popleft()
            seq.num_computed = self.blocks.allocate(seq, seq.max_total_tokens)
            self._start(seq)
            self.batch.append(seq)
        if not self.batch:
            return out
        longest = max(s.num_uncomputed for s in self.batch)
        for seq in self.batch:
            out.scheduled.append(Scheduled(seq, seq.num_uncomputed, True))
            out.padding_tokens += longest - seq.num_uncomputed
        return out

    def _schedule_continuous(self) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self.max_num_batched_tokens
        decodes, prefills = [], []
        for seq in self.running:
            (prefills if seq.in_prefill else decodes).append(seq)
        tables, bs = self.blocks.tables, self.blocks.block_size
        for seq in decodes + prefills:
            if seq.status is not Status.RUNNING or budget == 0:
                continue
            left = seq.num_uncomputed
            n = min(left, budget)
            if seq.num_computed + n <= len(tables[seq.request_id]) * bs:   # fits its blocks already
                out.scheduled.append(Scheduled(seq, n, n == left))
                budget -= n
                continue
            # make room for the new tokens, preempting the newest requests if blocks ran out
            while self.blocks.blocks_needed(seq, seq.num_computed + n) > self.blocks.num_free_blocks:
                victim = self.running[-1]
                self._preempt(victim)
                out.preempted.append(victim)
                if victim is seq:
                    break
            if seq.status is not Status.RUNNING:
                continue
            self.blocks.grow(seq, seq.num_computed + n)
            out.scheduled.append(Scheduled(seq, n, n == seq.num_uncomputed))
            budget -= n
        out.scheduled = [s for s in out.scheduled if s.seq.status is Status.RUNNING]
        if out.preempted:
            return out            # memory is short: admit nobody this step
        if not self._free_slots or budget == 0 or not self.waiting:
            return out            # nobody can be admitted (the common case: every slot busy)
        self._admit(out, budget)
        return out

    def _admit(self, out: SchedulerOutput, budget: int) -> None:
        """Admit waiting requests by the rule of `admit`, with their prefix-cache hits.

        `admit` reads the queue lazily and reads a request only once it admitted the one before,
        so each admitted request takes its blocks here before the next one's hits are looked up:
        a cached block that the first one just took off the free list costs the second nothing.
        """
        allocated: list[Sequence] = []

        def take(seq: Sequence) -> None:
            seq.num_computed = self.blocks.allocate(seq, seq.num_tokens)   # the cached prefix
            allocated.append(seq)

        def prefix_hits() -> Iterator[tuple[int, int]]:
            prev = None
            for seq in self.waiting:
                if prev is not None:     # admit asks for this request only once it admitted prev
                    take(prev)
                yield self.blocks.cached_prefix(seq)
                prev = seq

        tokens, hits = (s.num_tokens for s in self.waiting), prefix_hits()
        chunks = admit(tokens, self.blocks.num_free_blocks, self.blocks.block_size,
                       len(self._free_slots), budget, hits)
        tokens.close()
        hits.close()                     # both read the queue, which changes below
        if len(allocated) > len(chunks):
            raise RuntimeError(f"admit read {len(allocated) + 1} waiting requests to admit {len(chunks)}: "
                               "it must read one request at a time")
        for i, chunk in enumerate(chunks):
            seq = self.waiting.popleft()
            if i == len(allocated):      # the last one admitted: admit never asked past it
                take(seq)
            self._start(seq)
            out.scheduled.append(Scheduled(seq, chunk, chunk == seq.num_uncomputed))

    # ---- after the model ran ------------------------------------------------------------
    def postprocess(self, out: SchedulerOutput, tokens: list[int | None], now: float
                    ) -> list[tuple[Sequence, int]]:
        """Advance each scheduled sequence; append sampled tokens; retire finished requests.
        `tokens[i]` belongs to `out.scheduled[i]` (None where it does not sample).
        Returns the (sequence, token) pairs produced this step."""
        if len(tokens) != len(out.scheduled):
            raise ValueError(f"{len(tokens)} tokens for {len(out.scheduled)} scheduled items")
        produced = []
        for item, token in zip(out.scheduled, tokens):
            seq = item.seq
            if seq.status is not Status.RUNNING:     # aborted while the step ran
                continue
            seq.num_computed += item.num_tokens
            self.blocks.commit(seq)
            if item.sample:
                if token is None:
                    raise ValueError(f"request {seq.request_id!r} samples this step but got no token "
                                     "(are the tokens in the order of out.scheduled?)")
                produced.append((seq, int(token)))
                if seq.append(int(token), now):
                    self._finish(seq, now)
        return produced
