"""Communication, named after what it does in the forward and in the backward pass.

Tensor parallelism needs four ops, each the transpose of another (as in Megatron-LM and
picotron): what is an all-reduce in the forward pass is an identity in the backward pass and the
other way round, and a gather is the transpose of a split.

| op                      | forward          | backward          |
|-------------------------|------------------|-------------------|
| copy_to_tp_region       | identity         | all-reduce        |
| reduce_from_tp_region   | all-reduce       | identity          |
| gather_from_tp_region   | all-gather (last dim) | split (last dim) |
| split_to_tp_region      | split (last dim) | all-gather (last dim) |
| all_to_all              | all-to-all       | all-to-all, splits swapped |

Below them, the alpha-beta cost model of the collectives and the bus-bandwidth convention of
nccl-tests.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.distributed as dist

# torch 2.13 renamed the single-tensor collectives; older versions only have the old names.
_all_gather_1 = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter_1 = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def world(group: Any = None) -> tuple[int, int]:
    """(rank, world size) in `group`; (0, 1) without a process group."""
    if not dist.is_available() or not dist.is_initialized():
        return 0, 1
    return dist.get_rank(group), dist.get_world_size(group)


def all_gather_last(x: torch.Tensor, group: Any = None) -> torch.Tensor:
    """Concatenate every rank's `x` along the last dimension (rank order)."""
    _, n = world(group)
    if n == 1:
        return x
    out = torch.empty(n * x.numel(), dtype=x.dtype, device=x.device)
    _all_gather_1(out, x.contiguous().view(-1), group=group)
    return torch.cat(out.view((n,) + tuple(x.shape)).unbind(0), dim=-1)


def split_last(x: torch.Tensor, group: Any = None) -> torch.Tensor:
    """This rank's equal slice of the last dimension."""
    rank, n = world(group)
    if x.shape[-1] % n:
        raise ValueError(f"last dimension {x.shape[-1]} is not divisible by world size {n}")
    return x.chunk(n, dim=-1)[rank].contiguous()


# per group, an optional all-reduce for small tensors (parallel/oneshot.py); NCCL does the rest
_small_all_reduce: dict[Any, Any] = {}


def set_small_all_reduce(fn: Any, group: Any = None) -> None:
    """Route the group's small all-reduces to `fn` (an object with .accepts(x) and __call__(x)),
    or back to NCCL with fn=None."""
    if fn is None:
        _small_all_reduce.pop(group, None)
    else:
        _small_all_reduce[group] = fn


def all_reduce_sum(x: torch.Tensor, group: Any = None) -> torch.Tensor:
    """The sum of every rank's x (x itself is overwritten, except on the small-message path)."""
    if world(group)[1] > 1:
        small = _small_all_reduce.get(group)
        if small is not None and small.accepts(x):
            return small(x)
        x = x.contiguous()
        dist.all_reduce(x, group=group)
    return x


class _CopyToTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x

    @staticmethod
    def backward(ctx, g):
        # every rank used the same x, so its gradient is the sum of the ranks' gradients
        return all_reduce_sum(g.clone(), ctx.group), None


class _ReduceFromTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        return all_reduce_sum(x.clone(), group)

    @staticmethod
    def backward(ctx, g):
        return g, None


class _GatherFromTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return all_gather_last(x, group)

    @staticmethod
    def backward(ctx, g):
        return split_last(g, ctx.group), None


class _SplitToTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return split_last(x, group)

    @staticmethod
    def backward(ctx, g):
        return all_gather_last(g, ctx.group), None


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, out_splits, in_splits, group):
        ctx.group, ctx.out_splits, ctx.in_splits = group, out_splits, in_splits
        x = x.contiguous()
        out = x.new_empty((sum(out_splits),) + tuple(x.shape[1:]))
        dist.all_to_all_single(out, x, list(out_splits), list(in_splits), group=group)
        return out

    @staticmethod
    def backward(ctx, g):
        # the gradient travels back the way the rows came: the splits swap roles
        g = g.contiguous()
        out = g.new_empty((sum(ctx.in_splits),) + tuple(g.shape[1:]))
        dist.all_to_all_single(out, g, list(ctx.in_splits), list(ctx.out_splits), group=ctx.group)
        return out, None, None, None


def copy_to_tp_region(x: torch.Tensor, group: Any = None) -> torch.Tensor:
    """Forward: identity. Backward: all-reduce (the input fans out to every rank's shard)."""
    return _CopyToTP.apply(x, group) if world(group)[1] > 1 else x


def reduce_from_tp_region(x: torch.Tensor, group: Any = None) -> torch.Tensor:
    """Forward: all-reduce of the ranks' partial sums. Backward: identity."""
    return _ReduceFromTP.apply(x, group) if world(group)[1] > 1 else x


def gather_from_tp_region(x: torch.Tensor, group: Any = None) -> torch.Tensor:
    """Forward: all-gather along the last dim. Backward: keep this rank's slice."""
    return _GatherFromTP.apply(x, group) if world(group)[1] > 1 else x


def split_to_tp_region(x: torch.Tensor, group: Any = None) -> torch.Tensor:
    """Forward: keep this rank's slice of the last dim. Backward: all-gather."""
    return _SplitToTP.apply(x, group) if world(group)[1] > 1 else x


def all_to_all(x: torch.Tensor, out_splits: Sequence[int], in_splits: Sequence[int],
               group: Any = None) -> torch.Tensor:
    """Rows `in_splits[j]` of x go to rank j; rows `out_splits[j]` arrive from rank j (dim 0)."""
    return _AllToAll.apply(x, tuple(int(s) for s in out_splits),
                           tuple(int(s) for s in in_splits), group)


# ---------------------------------------------------------------- the alpha-beta cost model

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")


def _check(op: str, n: int) -> None:
    if op not in COLLECTIVES:
        raise ValueError(f"op={op!r}; choose one of {COLLECTIVES}")
    if n < 1:
        raise ValueError(f"n={n}; the number of ranks must be >= 1")


def bus_factor(op: str, n: int) -> float:
    """busbw / algbw in nccl-tests: 2(n-1)/n for all-reduce, (n-1)/n for the others."""
    _check(op, n)
    return (2.0 if op == "all_reduce" else 1.0) * (n - 1) / n


def collective_time(op: str, nbytes: float, n: int, alpha_s: float = 5e-6,
                    bandwidth_Bps: float = 100e9) -> float:
    """Seconds for a ring collective on `nbytes` (the full buffer: all-reduce input, all-gather
    output, reduce-scatter input, all-to-all send buffer) among n ranks.

    Each of the steps costs alpha (latency); each rank sends bus_factor * nbytes in total over
    its link of `bandwidth_Bps` (beta = 1 / bandwidth). All-reduce = reduce-scatter + all-gather:
        all_reduce:      2(n-1) alpha + 2(n-1)/n * N beta
        all_gather, reduce_scatter, all_to_all: (n-1) alpha + (n-1)/n * N beta
    """
    _check(op, n)
    if n == 1:
        return 0.0
    steps = 2 * (n - 1) if op == "all_reduce" else n - 1
    return steps * alpha_s + bus_factor(op, n) * nbytes / bandwidth_Bps


def algbw(nbytes: float, seconds: float) -> float:
    """Algorithm bandwidth (bytes/s): buffer size over time, as nccl-tests reports it."""
    return nbytes / seconds


def busbw(op: str, nbytes: float, seconds: float, n: int) -> float:
    """Bus bandwidth (bytes/s): algbw * bus_factor, comparable to the link's peak for any n."""
    return algbw(nbytes, seconds) * bus_factor(op, n)


def fit_alpha_beta(nbytes: Sequence[float], seconds: Sequence[float], op: str,
                   n: int) -> tuple[float, float]:
    """(alpha_s, bandwidth_Bps) of collective_time through measured points.

    Least squares on *relative* errors: sizes span six orders of magnitude, and plain least
    squares would fit the largest messages only and leave alpha to chance.
    """
    import numpy as np
    _check(op, n)
    if n < 2:
        raise ValueError(f"n={n}; fitting needs at least 2 ranks")
    steps = 2 * (n - 1) if op == "all_reduce" else n - 1
    a = np.stack([np.full(len(nbytes), steps, dtype=float),
                  bus_factor(op, n) * np.asarray(nbytes, dtype=float)], axis=1)
    t = np.asarray(seconds, dtype=float)
    (alpha, beta), *_ = np.linalg.lstsq(a / t[:, None], np.ones_like(t), rcond=None)
    return float(max(alpha, 0.0)), float(1.0 / beta) if beta > 0 else float("inf")


def measure_collective(rank: int, world_size: int, op: str = "all_reduce",
                       sizes_bytes: Sequence[int] = (1 << 10, 1 << 20), dtype: str = "float32",
                       warmup: int = 3, repeat: int = 10) -> list[dict]:
    """Time one collective per message size on every rank (run it with the launcher).

    Returns median seconds per call, algbw and busbw per size (the slowest rank's median, the
    same on every rank). On GPUs it uses CUDA events; on CPU, host clocks.
    """
    import statistics
    import time
    _check(op, world_size)
    dt = getattr(torch, dtype)
    cuda = dist.get_backend() == "nccl"
    dev = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    esize = torch.finfo(dt).bits // 8 if dt.is_floating_point else torch.iinfo(dt).bits // 8
    rows = []
    for nbytes in sizes_bytes:
        numel = max(world_size, (int(nbytes) // esize) // world_size * world_size)
        x = torch.randn(numel, device=dev).to(dt)
        if op == "all_reduce":
            def call() -> None:
                dist.all_reduce(x)
        elif op == "all_gather":
            src, out = x[: numel // world_size], torch.empty_like(x)
            def call() -> None:
                _all_gather_1(out, src)
        elif op == "reduce_scatter":
            out = torch.empty(numel // world_size, dtype=dt, device=dev)
            def call() -> None:
                _reduce_scatter_1(out, x)
        else:
            out = torch.empty_like(x)
            def call() -> None:
                dist.all_to_all_single(out, x)
        # as nccl-tests do: back-to-back calls between two timestamps, so that the ranks' skew
        # at the start is paid once per batch of calls rather than once per call
        inner = max(1, min(20, (64 << 20) // max(1, numel * esize)))
        for _ in range(warmup):
            call()
        times = []
        for _ in range(repeat):
            dist.barrier()
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(inner):
                    call()
                end.record()
                end.synchronize()
                t = start.elapsed_time(end) / 1e3
            else:
                t0 = time.perf_counter()
                for _ in range(inner):
                    call()
                t = time.perf_counter() - t0
            times.append(t / inner)
        # the slowest rank decides when a collective is over
        med = torch.tensor([statistics.median(times)], dtype=torch.float64, device=dev)
        dist.all_reduce(med, op=dist.ReduceOp.MAX)
        sec = float(med.item())
        real_bytes = numel * esize
        rows.append({"op": op, "bytes": real_bytes, "n": world_size, "median_s": sec,
                     "algbw_GBps": algbw(real_bytes, sec) / 1e9,
                     "busbw_GBps": busbw(op, real_bytes, sec, world_size) / 1e9})
    return rows
