"""Tensor parallelism: column- and row-parallel linears, a TP MLP and TP attention.

A linear y = x W^T can be split two ways over n ranks:
- column parallel: each rank holds out/n rows of W (a slice of the output features); the input
  is copied to every rank and each computes its slice of y;
- row parallel: each rank holds in/n columns of W; each rank multiplies its slice of x and the
  partial products are summed by an all-reduce.
Column then row (the Megatron-LM MLP) needs no communication in between and exactly one
all-reduce at the end. Attention splits the same way over heads: q/k/v are column parallel
(whole heads per rank), the output projection is row parallel.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .comm import (all_reduce_sum, copy_to_tp_region, gather_from_tp_region, reduce_from_tp_region,
                   split_to_tp_region, world)


def _shard(t: torch.Tensor, dim: int, rank: int, n: int) -> torch.Tensor:
    if t.shape[dim] % n:
        raise ValueError(f"dimension {dim} of size {t.shape[dim]} is not divisible by {n} ranks")
    return t.chunk(n, dim=dim)[rank].clone()


class ColumnParallelLinear(nn.Module):
    """y[..., out/n slice] = x W_shard^T (+ b_shard); optionally gathered to the full y."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None, *,
                 gather_output: bool = False, group: Any = None):
        super().__init__()
        self.weight = nn.Parameter(weight)
        self.bias = nn.Parameter(bias) if bias is not None else None
        self.gather_output, self.group = gather_output, group

    @classmethod
    def from_linear(cls, linear: nn.Linear, group: Any = None, **kw: Any) -> "ColumnParallelLinear":
        rank, n = world(group)
        b = None if linear.bias is None else _shard(linear.bias.detach(), 0, rank, n)
        return cls(_shard(linear.weight.detach(), 0, rank, n), b, group=group, **kw)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(copy_to_tp_region(x, self.group), self.weight, self.bias)
        return gather_from_tp_region(y, self.group) if self.gather_output else y


class RowParallelLinear(nn.Module):
    """y = all_reduce(x[..., in/n slice] W_shard^T) + b; the bias is added once, after the sum."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None, *,
                 input_is_parallel: bool = True, group: Any = None):
        super().__init__()
        self.weight = nn.Parameter(weight)
        self.bias = nn.Parameter(bias) if bias is not None else None
        self.input_is_parallel, self.group = input_is_parallel, group

    @classmethod
    def from_linear(cls, linear: nn.Linear, group: Any = None, **kw: Any) -> "RowParallelLinear":
        rank, n = world(group)
        b = None if linear.bias is None else linear.bias.detach().clone()
        return cls(_shard(linear.weight.detach(), 1, rank, n), b, group=group, **kw)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.input_is_parallel:
            x = split_to_tp_region(x, self.group)
        y = F.linear(x, self.weight)
        if torch.is_grad_enabled():
            y = reduce_from_tp_region(y, self.group)
        else:  # inference: sum in place, no autograd node and no copy
            y = all_reduce_sum(y, self.group)
        return y + self.bias if self.bias is not None else y


class SwiGLU(nn.Module):
    """The Llama MLP: down(silu(gate(x)) * up(x)); the single-process reference."""

    def __init__(self, hidden: int, ffn: int):
        super().__init__()
        self.gate = nn.Linear(hidden, ffn, bias=False)
        self.up = nn.Linear(hidden, ffn, bias=False)
        self.down = nn.Linear(ffn, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class TPSwiGLU(nn.Module):
    """gate and up column parallel, down row parallel: one all-reduce per call."""

    def __init__(self, ref: SwiGLU, group: Any = None):
        super().__init__()
        self.gate = ColumnParallelLinear.from_linear(ref.gate, group)
        self.up = ColumnParallelLinear.from_linear(ref.up, group)
        self.down = RowParallelLinear.from_linear(ref.down, group)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # copy_to_tp_region once for both column layers: its backward sums their input grads
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Attention(nn.Module):
    """Causal multi-head attention with grouped-query heads (n_kv_heads divides n_heads)."""

    def __init__(self, hidden: int, n_heads: int, n_kv_heads: int):
        super().__init__()
        if hidden % n_heads or n_heads % n_kv_heads:
            raise ValueError(f"need n_heads | hidden and n_kv_heads | n_heads; got hidden={hidden}, "
                             f"n_heads={n_heads}, n_kv_heads={n_kv_heads}")
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, hidden // n_heads
        self.q = nn.Linear(hidden, n_heads * self.head_dim, bias=False)
        self.k = nn.Linear(hidden, n_kv_heads * self.head_dim, bias=False)
        self.v = nn.Linear(hidden, n_kv_heads * self.head_dim, bias=False)
        self.o = nn.Linear(n_heads * self.head_dim, hidden, bias=False)

    def attend(self, x: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
               v: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        hq, hk = q.shape[-1] // self.head_dim, k.shape[-1] // self.head_dim
        q = q.view(b, t, hq, self.head_dim).transpose(1, 2)
        k = k.view(b, t, hk, self.head_dim).transpose(1, 2).repeat_interleave(hq // hk, dim=1)
        v = v.view(b, t, hk, self.head_dim).transpose(1, 2).repeat_interleave(hq // hk, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return y.transpose(1, 2).reshape(b, t, hq * self.head_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.o(self.attend(x, self.q(x), self.k(x), self.v(x)))


def kv_heads_of_rank(n_heads: int, n_kv_heads: int, rank: int, n: int) -> range:
    """The K/V heads rank `rank` needs for its n_heads/n query heads.

    With n_kv_heads >= n each rank owns n_kv_heads/n of them; with fewer K/V heads than ranks,
    each K/V head is replicated on the n/n_kv_heads ranks whose query heads read it.
    """
    if n_heads % n:
        raise ValueError(f"n_heads={n_heads} is not divisible by tp={n}")
    if n_kv_heads % n == 0:
        per = n_kv_heads // n
        return range(rank * per, (rank + 1) * per)
    if n % n_kv_heads == 0:
        h = rank // (n // n_kv_heads)
        return range(h, h + 1)
    raise ValueError(f"n_kv_heads={n_kv_heads} and tp={n}: one must divide the other")


class TPAttention(Attention):
    """Heads split over ranks: q/k/v column parallel (whole heads), o row parallel."""

    def __init__(self, ref: Attention, group: Any = None):
        nn.Module.__init__(self)
        rank, n = world(group)
        self.n_heads, self.n_kv_heads, self.head_dim = ref.n_heads, ref.n_kv_heads, ref.head_dim
        d = self.head_dim
        kv = kv_heads_of_rank(ref.n_heads, ref.n_kv_heads, rank, n)
        rows = slice(kv.start * d, kv.stop * d)
        self.group = group
        self.q = ColumnParallelLinear.from_linear(ref.q, group)
        self.k = ColumnParallelLinear(ref.k.weight.detach()[rows].clone(), group=group)
        self.v = ColumnParallelLinear(ref.v.weight.detach()[rows].clone(), group=group)
        self.o = RowParallelLinear.from_linear(ref.o, group)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.o(self.attend(x, self.q(x), self.k(x), self.v(x)))


# ------------------------------------------------------------------ checks (run on each rank)

def _grad_err(ref: torch.Tensor, got: torch.Tensor) -> float:
    ref, got = ref.detach(), got.detach()
    return float((ref - got).abs().max() / ref.abs().max().clamp_min(1e-30))


def check_tp(rank: int, world_size: int, hidden: int = 64, ffn: int = 128, n_heads: int = 8,
             n_kv_heads: int = 2, tokens: int = 12, seed: int = 0) -> dict[str, float]:
    """Max relative errors of the TP layers against the unsharded modules (outputs and grads)."""
    torch.manual_seed(seed)
    x = torch.randn(2, tokens, hidden)
    errs: dict[str, float] = {}

    # column (gathered) and row (split input) linears with bias
    lin, row_ref = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)
    col = ColumnParallelLinear.from_linear(lin, gather_output=True)
    row = RowParallelLinear.from_linear(row_ref, input_is_parallel=False)
    xr, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
    y_ref = row_ref(lin(xr))
    y = row(col(xc))
    errs["linear_out"] = _grad_err(y_ref, y)
    y_ref.square().sum().backward()
    y.square().sum().backward()
    errs["linear_dx"] = _grad_err(xr.grad, xc.grad)
    errs["column_dw"] = _grad_err(_shard(lin.weight.grad, 0, rank, world_size), col.weight.grad)
    errs["column_db"] = _grad_err(_shard(lin.bias.grad, 0, rank, world_size), col.bias.grad)
    errs["row_dw"] = _grad_err(_shard(row_ref.weight.grad, 1, rank, world_size), row.weight.grad)
    errs["row_db"] = _grad_err(row_ref.bias.grad, row.bias.grad)

    # the MLP
    ref = SwiGLU(hidden, ffn)
    tp = TPSwiGLU(ref)
    xr, xt = x.clone().requires_grad_(), x.clone().requires_grad_()
    y_ref, y = ref(xr), tp(xt)
    errs["mlp_out"] = _grad_err(y_ref, y)
    y_ref.square().sum().backward()
    y.square().sum().backward()
    errs["mlp_dx"] = _grad_err(xr.grad, xt.grad)
    errs["mlp_dgate"] = _grad_err(_shard(ref.gate.weight.grad, 0, rank, world_size), tp.gate.weight.grad)
    errs["mlp_ddown"] = _grad_err(_shard(ref.down.weight.grad, 1, rank, world_size), tp.down.weight.grad)

    # attention with grouped-query heads
    att = Attention(hidden, n_heads, n_kv_heads)
    tpa = TPAttention(att)
    xr, xt = x.clone().requires_grad_(), x.clone().requires_grad_()
    y_ref, y = att(xr), tpa(xt)
    errs["attn_out"] = _grad_err(y_ref, y)
    y_ref.square().sum().backward()
    y.square().sum().backward()
    errs["attn_dx"] = _grad_err(xr.grad, xt.grad)
    errs["attn_dq"] = _grad_err(_shard(att.q.weight.grad, 0, rank, world_size), tpa.q.weight.grad)
    errs["attn_do"] = _grad_err(_shard(att.o.weight.grad, 1, rank, world_size), tpa.o.weight.grad)
    # a K/V head replicated on several ranks gets the sum of their gradients
    d = att.head_dim
    kv = kv_heads_of_rank(n_heads, n_kv_heads, rank, world_size)
    gk = tpa.k.weight.grad.clone()
    if n_kv_heads < world_size:
        import torch.distributed as dist
        share = world_size // n_kv_heads
        groups = [list(range(h * share, (h + 1) * share)) for h in range(n_kv_heads)]
        full = [torch.empty_like(gk) for _ in range(world_size)]
        dist.all_gather(full, gk)
        gk = sum(full[r] for r in groups[kv.start])
    errs["attn_dk"] = _grad_err(att.k.weight.grad[kv.start * d: kv.stop * d], gk)
    return errs
