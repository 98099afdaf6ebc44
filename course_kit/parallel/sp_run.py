"""Sequence parallelism run on processes (notebook 09, §4): an MLP block LayerNorm -> column-parallel
linear -> GeLU -> row-parallel linear -> dropout -> residual, with TP alone and with TP + sequence
parallelism, against the unsharded block.

With TP alone every rank holds all s tokens outside the TP region (the LayerNorm, the dropout, the
residual), and the row-parallel linear ends with an all-reduce. With sequence parallelism each rank
holds s/t tokens there; entering the TP region is an all-gather along the sequence (its backward
a reduce-scatter), leaving it a reduce-scatter (its backward an all-gather); the first linear keeps
only its input's s/t rows for the backward pass and gathers them again there. `check_sp` compares
outputs and gradients with the unsharded block, and counts the bytes autograd saves for the
backward pass on each rank (torch.autograd.graph.saved_tensors_hooks), which is what sequence
parallelism is for.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from .comm import copy_to_tp_region, reduce_from_tp_region, world


def _gather_seq(x: torch.Tensor, group: Any) -> torch.Tensor:
    _, n = world(group)
    parts = [torch.empty_like(x) for _ in range(n)]
    dist.all_gather(parts, x.contiguous(), group=group)
    return torch.cat(parts, dim=0)


def _reduce_scatter_seq(x: torch.Tensor, group: Any) -> torch.Tensor:
    # all-reduce then keep this rank's rows: the result of a reduce-scatter, with the collective
    # every backend has (gloo has no reduce-scatter); NCCL would use dist.reduce_scatter_tensor
    rank, n = world(group)
    x = x.contiguous().clone()
    dist.all_reduce(x, group=group)
    return x.chunk(n, dim=0)[rank].contiguous()


class _ReduceScatterSeq(torch.autograd.Function):
    """Forward: reduce-scatter along the sequence. Backward: all-gather."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _reduce_scatter_seq(x, group)

    @staticmethod
    def backward(ctx, g):
        return _gather_seq(g, ctx.group), None


class _GatherLinear(torch.autograd.Function):
    """all-gather(h) @ w^T, saving only this rank's s/t rows of h (gathered again in the backward
    pass, as Megatron-LM does with sequence parallelism): the stored input is divided by t too."""

    @staticmethod
    def forward(ctx, h, w, group):
        ctx.group = group
        ctx.save_for_backward(h, w)
        return _gather_seq(h, group) @ w.t()

    @staticmethod
    def backward(ctx, g):
        h, w = ctx.saved_tensors
        full = _gather_seq(h, ctx.group)                    # the gather again, instead of storing it
        return _reduce_scatter_seq(g @ w, ctx.group), g.t() @ full, None


class Block(nn.Module):
    """x + dropout(W2 gelu(W1 norm(x))); tokens along dim 0 ([s, hidden])."""

    def __init__(self, hidden: int, p_drop: float = 0.0):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.fc1, self.fc2 = nn.Linear(hidden, 4 * hidden, bias=False), nn.Linear(4 * hidden, hidden, bias=False)
        self.p_drop = p_drop

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.dropout(self.fc2(F.gelu(self.fc1(self.norm(x)))), self.p_drop, self.training)


class ParallelBlock(nn.Module):
    """The same block with fc1 column-parallel and fc2 row-parallel; sequence_parallel=True keeps
    s/t tokens per rank outside the TP region."""

    def __init__(self, ref: Block, sequence_parallel: bool, group: Any = None):
        super().__init__()
        rank, n = world(group)
        self.group, self.sp, self.p_drop = group, sequence_parallel, ref.p_drop
        self.norm = nn.LayerNorm(ref.norm.normalized_shape)
        self.norm.load_state_dict(ref.norm.state_dict())
        self.w1 = nn.Parameter(ref.fc1.weight.detach().chunk(n, 0)[rank].clone())
        self.w2 = nn.Parameter(ref.fc2.weight.detach().chunk(n, 1)[rank].clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)                                          # s/t tokens with SP, s without
        if self.sp:
            u = _GatherLinear.apply(h, self.w1, self.group)       # all s tokens, out/t features
        else:
            u = copy_to_tp_region(h, self.group) @ self.w1.t()
        y = F.gelu(u) @ self.w2.t()                               # partial sums of the output
        y = _ReduceScatterSeq.apply(y, self.group) if self.sp else reduce_from_tp_region(y, self.group)
        return x + F.dropout(y, self.p_drop, self.training)


def saved_bytes(fn: Any, module: nn.Module) -> tuple[Any, int]:
    """(fn(), bytes of the tensors autograd saved for backward while fn ran), counting each storage
    once and leaving out the module's parameters (and views of them, such as a transposed weight)."""
    total = 0
    seen: set[int] = {p.untyped_storage().data_ptr() for p in module.parameters()}

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal total
        key = t.untyped_storage().data_ptr()
        if key not in seen:
            seen.add(key)
            total += t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return out, total


def check_sp(rank: int, world_size: int, seq: int = 32, hidden: int = 16, seed: int = 0) -> dict[str, Any]:
    """TP and TP + SP blocks against the unsharded block: outputs, input and weight gradients, and
    the bytes each saves for its backward pass (the unsharded block's on this rank, for scale)."""
    if seq % world_size:
        raise ValueError(f"seq={seq} must be divisible by world_size={world_size}")
    torch.manual_seed(seed)
    ref = Block(hidden)
    x = torch.randn(seq, hidden)
    xr = x.clone().requires_grad_()
    y_ref, ref_saved = saved_bytes(lambda: ref(xr), ref)
    y_ref.square().sum().backward()
    lo, hi = rank * seq // world_size, (rank + 1) * seq // world_size

    def rel(a: torch.Tensor, b: torch.Tensor) -> float:
        return float((a - b).abs().max() / b.abs().max())

    out: dict[str, Any] = {"saved_bytes_one_process": ref_saved}
    for name, sp in (("tp", False), ("tp_sp", True)):
        block = ParallelBlock(ref, sp)
        xin = (x[lo:hi] if sp else x).clone().requires_grad_()
        y, saved = saved_bytes(lambda: block(xin), block)
        # the loss of the whole output: with SP each rank holds its rows, without it every rank
        # holds all of them (count them once)
        (y.square().sum() / (1 if sp else world_size)).backward()
        want_y = y_ref.detach()[lo:hi] if sp else y_ref.detach()
        gx = xin.grad if sp else xin.grad.clone()
        if not sp:      # each rank's copy of x received 1/n of the loss's gradient: sum them
            dist.all_reduce(gx)
        g_norm = block.norm.weight.grad.clone()
        dist.all_reduce(g_norm)  # the LayerNorm is replicated: each rank holds a share of its gradient
        out[f"{name}_out"] = rel(y.detach(), want_y)
        out[f"{name}_dx"] = rel(gx, xr.grad[lo:hi] if sp else xr.grad)
        out[f"{name}_dw1"] = rel(block.w1.grad * (1 if sp else world_size),
                                 ref.fc1.weight.grad.chunk(world_size, 0)[rank])
        out[f"{name}_dnorm"] = rel(g_norm, ref.norm.weight.grad)
        out[f"{name}_saved_bytes"] = saved
    return out
