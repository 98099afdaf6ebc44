"""Tensor parallelism's sums folded into the products: no all-reduce kernel (notebooks 05 and 09).

Under tensor parallelism each rank's wo and w2 products are partial sums (row parallel): the
next layer needs their sum over the ranks. The one-shot all-reduce (parallel/oneshot.py) does it
in a kernel of its own (about 7 µs on two H200s in the fitted model of notebook 09, §8), twice a
layer: at batch 1 that is what stops TP from paying on a 1B model. Here the exchange rides in the
kernels that are there anyway:

- the product (the producer) stores its rows into its own slot of every rank's buffer, local or
  across NVLink (symmetric memory maps the peers' buffers into this process), then signals. Each
  program counts itself in on a local counter; the last one to arrive raises the exchange's flag
  on every rank (release, system scope: what it and the programs before it stored is visible
  before the flag is);
- the next kernel that reads x (a consumer: the q/k/v product, w13, the logits product) waits
  for the flag to count every rank in (acquire), then loads x as the sum of the slots, in rank
  order, as it loads it anyway. Rank 0's next residual add reads the same sum.

Flags only grow: an exchange's flag counts `world` each step, and `epoch` counts the steps, so a
consumer waits for (epoch + 1) * world. The step's last kernel (`finish`) waits for the logits
and advances the epoch. Nothing is reset, so a CUDA graph of the step can be replayed. Two slot
sets take turns (even and odd exchanges): a rank cannot start writing exchange e + 2 before
every rank has passed e + 1, and with it every read of e.

Measured and not kept: each value its own flag (an empty slot holds -0.0, which no product
sends, so a consumer polls the values themselves and no flag or fence is needed). Every consumer
program then polls all of x, and the step got slower on two H200s
(data/reference/h200x2/logs/bench-parallel-s9-values-as-flags.log; code in commit 05d882e).

A rank that waits too long (a peer never arrived) stops waiting, marks `errors`, and goes on
with wrong sums; `check()` raises. `SimulatedExchange` runs the same kernels for several ranks in
one process (CPU tests under the Triton interpreter).
"""
from __future__ import annotations

import itertools
import os
import threading
from dataclasses import dataclass
from typing import Any

import torch

from ...device import use_triton_interpreter_without_cuda

use_triton_interpreter_without_cuda()   # before the first @triton.jit below

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

# polls of a flag before a rank gives up (about a second on a GPU; the interpreter is slower)
SPIN_LIMIT = 1000 if os.environ.get("TRITON_INTERPRET") == "1" else 1 << 22
why_not_folded = ""   # set when Exchange.for_group finds no symmetric memory


@triton.jit
def wait_for_ranks(READY, EPOCH, PER_STEP, SPIN: tl.constexpr):
    """Wait until an exchange's flag counts every rank in for this step (EPOCH[0] steps done).
    Polls with plain volatile loads (hundreds of programs spin on one word: an atomic each would
    queue them), then one acquire so that the slots read after it are the ones the flag covers."""
    target = (tl.load(EPOCH) + 1) * PER_STEP
    seen = tl.load(READY, volatile=True)
    tries = 0
    while (seen - target < 0) & (tries < SPIN):   # a difference: right when the counts wrap around
        seen = tl.load(READY, volatile=True)
        tries += 1
    if tries >= SPIN:
        tl.atomic_or(EPOCH + 1, 1)                 # errors: check() raises
    tl.atomic_add(READY, 0, sem="acquire", scope="sys")   # one thread (Triton's scalar atomics) ...
    tl.debug_barrier()                                     # ... and the others read after it


@triton.jit
def push_rows(SLOT_PTRS, ms, cols, stride, y, mask, WORLD: tl.constexpr):
    """Store y [BLOCK_M, BLOCK_N] at rows ms, columns cols of this rank's slot on every rank."""
    for r in tl.static_range(WORLD):
        base = tl.load(SLOT_PTRS + r).to(tl.pointer_type(y.dtype))
        tl.store(base + ms[:, None] * stride + cols[None, :], y, mask=mask)


@triton.jit
def signal_ranks(ARRIVE, FLAG_PTRS, flag, WORLD: tl.constexpr):
    """After this program's pushes: count it in; the last program raises the flag on every rank."""
    tl.debug_barrier()                                   # every thread's stores are issued
    arrived = tl.atomic_add(ARRIVE, 1, sem="acq_rel", scope="sys")
    if arrived == tl.num_programs(0) - 1:                # the last: the others' stores happened before
        tl.store(ARRIVE, 0)                              # ready for the next step's exchange
        for r in tl.static_range(WORLD):
            base = tl.load(FLAG_PTRS + r).to(tl.pointer_type(tl.int32))
            tl.atomic_add(base + flag, 1, sem="release", scope="sys")


@triton.jit
def _finish_kernel(READY, EPOCH, PER_STEP, SPIN: tl.constexpr, PDL: tl.constexpr):
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    wait_for_ranks(READY, EPOCH, PER_STEP, SPIN)         # every rank's logits are here
    tl.store(EPOCH, tl.load(EPOCH) + 1)                  # every read of this step is done


@dataclass(frozen=True)
class Sum:
    """What a consumer reads: x = parts.sum(0), once the exchange's flag says every rank is in."""
    parts: torch.Tensor     # [world, M, K], a view of this rank's buffer
    ready: torch.Tensor     # int32 [1]: the exchange's flag
    epoch: torch.Tensor     # int32 [2]: steps done, errors
    world: int


@dataclass(frozen=True)
class Push:
    """Where a producer stores: its slot on every rank, then a signal."""
    local: torch.Tensor     # [M, N] this rank's slot on this rank (what the call returns)
    slot_ptrs: torch.Tensor  # int64 [world]: the slot's address on each rank
    stride: int             # between rows of the slot
    arrive: torch.Tensor    # int32 [1]: programs arrived (this rank only)
    flag_ptrs: torch.Tensor  # int64 [world]: each rank's flag array
    flag: int               # the exchange's index in it
    world: int
    # the logits' Push only: (values, indices address tables, their row stride, this rank's first
    # vocabulary index), where gemv(argmax_into=...) puts each program's largest logit on every rank
    argmax: tuple[torch.Tensor, torch.Tensor, int, int] | None = None


class Exchange:
    """The buffers of one TP group's folded exchanges, for a model of `dim` and `vocab` (whole).

    x slots [2 turns, world, rows, dim] and logits [rows, vocab] live in symmetric memory (or, in
    `SimulatedExchange`, in one process); `flags` [exchanges] too; `arrive` and `epoch` are
    this rank's own. Exchange e < 2 * layers is the sum after layer e // 2's wo (e even) or w2
    (e odd); the last one is the logits."""

    def __init__(self, rank: int, world: int, layers: int, dim: int, vocab: int, rows: int,
                 dtype: torch.dtype, device: torch.device, allocate: Any, head_blocks: int = 1):
        self.rank, self.world, self.layers, self.rows = rank, world, layers, rows
        self.dim, self.vocab, self.head_blocks = dim, vocab, head_blocks
        self.exchanges = 2 * layers + 1
        self.x_slots, x_ptrs = allocate((2, world, rows, dim), dtype)
        self.logits, logit_ptrs = allocate((rows, vocab), dtype)
        # each rank's logits product keeps its programs' (head_blocks) largest logits: all ranks'
        # blocks side by side, so greedy decoding is one small kernel (argmax.tokens_from_blocks)
        self.block_vals, val_ptrs = allocate((rows, world * head_blocks), torch.float32)
        self.block_idx, idx_ptrs = allocate((rows, world * head_blocks), torch.int32)
        self.flags, flag_ptrs = allocate((self.exchanges,), torch.int32)
        self.arrive = torch.zeros(self.exchanges, dtype=torch.int32, device=device)
        self.epoch = torch.zeros(2, dtype=torch.int32, device=device)
        self._ptrs = {name: torch.tensor(p, dtype=torch.int64, device=device)
                      for name, p in (("x", x_ptrs), ("logits", logit_ptrs), ("flags", flag_ptrs),
                                      ("vals", val_ptrs), ("idx", idx_ptrs))}
        self._cache: dict[tuple, Any] = {}

    @classmethod
    def for_group(cls, comm: Any, layers: int, dim: int, vocab: int, dtype: torch.dtype,
                  device: torch.device, rows: int = 8, head_blocks: int = 1) -> "Exchange | None":
        """This rank's exchange over symmetric memory (a collective); None where it is missing.
        `comm` is the shard's communication (parallel.tp_llama.TPComm: its group, the group's
        symmetric-memory name)."""
        import torch.distributed as dist

        group = comm.group
        try:
            import torch.distributed._symmetric_memory as symm_mem
            group_name = comm.symmetric_memory_name()
            kept = []

            def allocate(shape, dt):
                t = symm_mem.empty(*shape, dtype=dt, device=device)
                t.zero_()
                handle = symm_mem.rendezvous(t, group_name)
                at = t.data_ptr() - handle.buffer_ptrs[handle.rank]   # the tensor's offset in its buffer
                kept.append(handle)
                return t, [p + at for p in handle.buffer_ptrs]

            ex = cls(dist.get_rank(group), dist.get_world_size(group), layers, dim, vocab, rows, dtype,
                     torch.device(device), allocate, head_blocks)
            ex._handles = kept
            torch.cuda.synchronize(device)
            dist.barrier(group)          # every rank's flags are zero before anyone signals
            return ex
        except Exception as e:  # noqa: BLE001 - no symmetric memory here: the all-reduce path it is
            global why_not_folded
            why_not_folded = f"{type(e).__name__}: {e}"[:300]
            return None

    # ---- what the step passes to its kernels -------------------------------------------
    def push_x(self, e: int, m: int) -> Push:
        """The wo (e even) or w2 (e odd) product's destination."""
        key = ("push", e, m)
        if key not in self._cache:
            local = self.x_slots[e % 2, self.rank, :m]
            at = local.data_ptr() - self.x_slots.data_ptr()            # bytes to this slot, on every rank
            self._cache[key] = Push(local, self._ptrs["x"] + at, self.dim,
                                    self.arrive[e:e + 1], self._ptrs["flags"], e, self.world)
        return self._cache[key]

    def sum_x(self, e: int, m: int) -> Sum:
        """x after exchange e: what the next q/k/v, w13 or logits product reads."""
        return Sum(self.x_slots[e % 2, :, :m], self.flags[e:e + 1], self.epoch, self.world)

    def push_logits(self, m: int) -> Push:
        """The logits product's destination: this rank's columns of every rank's logits."""
        e = self.exchanges - 1
        vs = self.vocab // self.world
        key = ("push", e, m)
        if key not in self._cache:
            at = self.rank * vs * self.logits.element_size()
            blk = self.rank * self.head_blocks * self.block_vals.element_size()   # bytes to this rank's first block
            argmax = (self._ptrs["vals"] + blk, self._ptrs["idx"] + blk, self.world * self.head_blocks, self.rank * vs)
            self._cache[key] = Push(self.logits[:m, self.rank * vs:(self.rank + 1) * vs],
                                    self._ptrs["logits"] + at, self.vocab, self.arrive[e:e + 1],
                                    self._ptrs["flags"], e, self.world, argmax)
        return self._cache[key]

    def blocks(self, m: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Every rank's logits blocks' maxima and their vocabulary indices, [m, world * head_blocks]."""
        return self.block_vals[:m], self.block_idx[:m]

    def finish(self, m: int, pdl: bool = False) -> torch.Tensor:
        """Wait for every rank's logits, close the step; the whole logits [m, vocab]."""
        e = self.exchanges - 1
        _finish_kernel[(1,)](self.flags[e:e + 1], self.epoch, self.world, SPIN=SPIN_LIMIT, PDL=pdl,
                             num_warps=1, **({"launch_pdl": True} if pdl else {}))
        return self.logits[:m]

    def pushed(self) -> None:
        """Called by the step after each producer's launch: a hook for SimulatedExchange."""

    def check(self) -> None:
        """Raise if a rank gave up waiting for its peers (the sums since are wrong)."""
        if int(self.epoch[1]):
            raise RuntimeError(f"rank {self.rank}: a TP exchange waited {SPIN_LIMIT} polls for a peer that "
                               "never arrived (the ranks ran different steps?); its outputs are wrong")


class SimulatedExchange(Exchange):
    """`world` ranks' exchanges in one process, on plain tensors: the CPU tests' stand-in for
    symmetric memory. Each rank's step runs in a thread; they take turns at every producer, so
    both ranks have pushed exchange e before either reads it."""

    @classmethod
    def group(cls, world: int, layers: int, dim: int, vocab: int, dtype: torch.dtype = torch.float32,
              device: str = "cpu", rows: int = 8, head_blocks: int = 1) -> list["SimulatedExchange"]:
        copies: list[list[torch.Tensor]] = []   # the i-th buffer of every rank

        def allocator(rank):
            made = itertools.count()

            def allocate(shape, dt):
                i = next(made)
                if i == len(copies):             # rank 0 makes every rank's copy of buffer i
                    copies.append([torch.zeros(shape, dtype=dt, device=device) for _ in range(world)])
                return copies[i][rank], [t.data_ptr() for t in copies[i]]
            return allocate
        ranks = [cls(r, world, layers, dim, vocab, rows, dtype, torch.device(device), allocator(r), head_blocks)
                 for r in range(world)]
        turn = _Turns(world)
        for ex in ranks:
            ex._turns = turn
        return ranks

    def pushed(self) -> None:
        self._turns.next(self.rank)


class _Turns:
    """Round-robin baton: rank r runs until its next push, then hands over to r + 1."""

    def __init__(self, world: int):
        self.world, self.now, self.done = world, 0, set()
        self.cv = threading.Condition()

    def start(self, rank: int) -> None:
        with self.cv:
            self.cv.wait_for(lambda: self.now == rank)

    def next(self, rank: int) -> None:
        with self.cv:
            self._advance(rank)
            self.cv.wait_for(lambda: self.now == rank)

    def end(self, rank: int) -> None:
        with self.cv:
            self.done.add(rank)
            self._advance(rank)

    def _advance(self, rank: int) -> None:
        for i in range(1, self.world + 1):
            r = (rank + i) % self.world
            if r not in self.done:
                self.now = r
                break
        self.cv.notify_all()
