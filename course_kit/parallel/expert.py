"""Expert parallelism: a mixture-of-experts layer whose experts live on different ranks.

A router scores every token against E experts and keeps the top k; the token's output is the
weighted sum of those k experts' outputs. With expert parallelism, rank r holds experts
[r E/n, (r+1) E/n) and its own tokens. One all-to-all sends each (token, expert) pair to the rank
holding the expert (dispatch); a second all-to-all brings the results back (combine). How many
rows go to each rank changes every step, so the ranks first exchange their counts.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from .comm import all_to_all, world
from .tensor import SwiGLU


def route(router: nn.Linear, x: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(weights [T, k], expert ids [T, k]): softmax over experts, top k, renormalised."""
    probs = F.softmax(router(x), dim=-1)
    w, idx = probs.topk(top_k, dim=-1)
    return w / w.sum(-1, keepdim=True), idx


class MoE(nn.Module):
    """Top-k routed SwiGLU experts (no capacity limit, no dropped tokens); single process."""

    def __init__(self, hidden: int, ffn: int, n_experts: int, top_k: int = 2):
        super().__init__()
        if not 1 <= top_k <= n_experts:
            raise ValueError(f"top_k={top_k}; it must be in 1..n_experts={n_experts}")
        self.top_k = top_k
        self.router = nn.Linear(hidden, n_experts, bias=False)
        self.experts = nn.ModuleList(SwiGLU(hidden, ffn) for _ in range(n_experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w, idx = route(self.router, x, self.top_k)
        y = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            tok, slot = (idx == e).nonzero(as_tuple=True)
            if tok.numel():
                y = y.index_add(0, tok, expert(x[tok]) * w[tok, slot, None])
        return y


class EPMoE(nn.Module):
    """The same layer with its experts spread over the ranks; the router is replicated."""

    def __init__(self, ref: MoE, group: Any = None):
        super().__init__()
        rank, n = world(group)
        n_exp = len(ref.experts)
        if n_exp % n:
            raise ValueError(f"{n_exp} experts do not split evenly over {n} ranks")
        self.group, self.top_k, self.n_experts, self.per_rank = group, ref.top_k, n_exp, n_exp // n
        self.first = rank * self.per_rank
        self.router = nn.Linear(ref.router.in_features, n_exp, bias=False)
        self.router.weight.data.copy_(ref.router.weight.detach())
        self.experts = nn.ModuleList()
        for e in range(self.first, self.first + self.per_rank):
            local = SwiGLU(ref.experts[e].gate.in_features, ref.experts[e].gate.out_features)
            local.load_state_dict(ref.experts[e].state_dict())
            self.experts.append(local)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, n = world(self.group)
        w, idx = route(self.router, x, self.top_k)
        # one row per (token, expert) pair, sorted by expert, hence by destination rank
        flat = idx.reshape(-1)
        order = flat.argsort(stable=True)
        token = order // self.top_k
        expert = flat[order]
        send = torch.bincount(expert // self.per_rank, minlength=n)
        recv = torch.empty_like(send)
        dist.all_to_all_single(recv, send, group=self.group)
        send_l, recv_l = send.tolist(), recv.tolist()
        # dispatch: the rows and the id of the expert each row is for
        rows = all_to_all(x[token], recv_l, send_l, self.group)
        got_expert = torch.empty(sum(recv_l), dtype=expert.dtype, device=expert.device)
        dist.all_to_all_single(got_expert, expert.contiguous(), recv_l, send_l, group=self.group)
        out = torch.zeros_like(rows)
        for j, mod in enumerate(self.experts):
            sel = (got_expert == self.first + j).nonzero(as_tuple=True)[0]
            if sel.numel():
                out = out.index_copy(0, sel, mod(rows[sel]))
        # combine: results go back the way they came, then are weighted and summed per token
        back = all_to_all(out, send_l, recv_l, self.group)
        weights = w.reshape(-1)[order]
        return torch.zeros_like(x).index_add(0, token, back * weights[:, None])


def check_ep(rank: int, world_size: int, hidden: int = 32, ffn: int = 64, n_experts: int = 8,
             top_k: int = 2, tokens_per_rank: int = 24, seed: int = 0) -> dict[str, float]:
    """Outputs and gradients of the expert-parallel layer against the single-process MoE."""
    torch.manual_seed(seed)
    ref = MoE(hidden, ffn, n_experts, top_k)
    x = torch.randn(world_size * tokens_per_rank, hidden)
    xr = x.clone().requires_grad_()
    y_ref = ref(xr)
    y_ref.square().sum().backward()

    ep = EPMoE(ref)
    lo, hi = rank * tokens_per_rank, (rank + 1) * tokens_per_rank
    xl = x[lo:hi].clone().requires_grad_()
    y = ep(xl)
    y.square().sum().backward()
    # the router is replicated (data parallel): its gradient is summed over the ranks
    g_router = ep.router.weight.grad.clone()
    dist.all_reduce(g_router, group=None)

    def rel(a: torch.Tensor, b: torch.Tensor) -> float:
        return float((a - b).abs().max() / a.abs().max().clamp_min(1e-30))

    errs = {"out": rel(y_ref.detach()[lo:hi], y.detach()), "dx": rel(xr.grad[lo:hi], xl.grad),
            "d_router": rel(ref.router.weight.grad, g_router)}
    errs["d_experts"] = max(rel(ref.experts[ep.first + j].gate.weight.grad, m.gate.weight.grad)
                            for j, m in enumerate(ep.experts)
                            if ref.experts[ep.first + j].gate.weight.grad is not None)
    counts = torch.bincount(route(ep.router, x[lo:hi], top_k)[1].reshape(-1), minlength=n_experts)
    dist.all_reduce(counts)
    errs["tokens_per_expert"] = counts.tolist()  # type: ignore[assignment]
    return errs
