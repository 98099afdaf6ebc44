"""ZeRO: shard the training state of data parallelism (notebook 09, §3).

Memory (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter
Models", SC 2020, section 5 and table 1). Mixed-precision Adam keeps, per parameter, 2 bytes of
16-bit weights, 2 of 16-bit gradients and K = 12 of optimizer state (fp32 master weights,
momentum, variance): 16 bytes. Plain data parallelism replicates all 16 on every GPU; over N GPUs
- stage 1 (P_os) shards the optimizer state:            2 + 2 + K/N
- stage 2 (P_os+g) also shards the gradients:           2 + (2 + K)/N
- stage 3 (P_os+g+p) also shards the 16-bit weights:    (2 + 2 + K)/N
(`zero_bytes_per_gpu`). FSDP's `fully_shard` is stage 3.

A run of stage 1 (`ZeRO1`): every rank computes the gradients of its own slice of the batch and
averages them with an all-reduce, as plain DP does; but each rank keeps the Adam state of only
1/N of the (flattened) parameters, updates only that slice, and an all-gather gives every rank
the whole updated model. Adam is element-wise, so the parameters equal plain DP's
(`check_zero1`, also against torch's own `ZeroRedundancyOptimizer`).
"""
from __future__ import annotations

from typing import Any, Iterable

import torch
import torch.distributed as dist
from torch import nn

STAGES = (0, 1, 2, 3)


def zero_bytes_per_gpu(n_params: float, n_gpus: int, stage: int, k: float = 12.0,
                       low_bytes: float = 2.0) -> dict[str, float]:
    """Bytes per GPU of {"weights", "gradients", "optimizer state"} at ZeRO `stage` (0 = plain DP)."""
    if stage not in STAGES:
        raise ValueError(f"stage={stage!r}; choose one of {STAGES}")
    if isinstance(n_gpus, bool) or not isinstance(n_gpus, int) or n_gpus < 1:
        raise ValueError(f"n_gpus={n_gpus!r}; it must be an integer >= 1")
    if not n_params >= 0 or not k >= 0 or not low_bytes > 0:
        raise ValueError(f"need n_params >= 0, k >= 0, low_bytes > 0; got {n_params}, {k}, {low_bytes}")
    n = n_gpus
    return {"weights": n_params * low_bytes / (n if stage >= 3 else 1),
            "gradients": n_params * low_bytes / (n if stage >= 2 else 1),
            "optimizer state": n_params * k / (n if stage >= 1 else 1)}


class ZeRO1:
    """Adam whose state is sharded over the ranks (ZeRO stage 1), for a model replicated on each.

    step(): all-reduce (average) the gradients, update this rank's slice of the flattened
    parameters with its own torch.optim.Adam, all-gather the slices into every rank's model.
    """

    def __init__(self, params: Iterable[nn.Parameter], group: Any = None, **adam: Any) -> None:
        self.params = [p for p in params if p.requires_grad]
        self.group = group
        self.rank, self.world = dist.get_rank(group), dist.get_world_size(group)
        total = sum(p.numel() for p in self.params)
        self.chunk = -(-total // self.world)                  # ceil: equal slices, last one padded
        self.total = total
        flat = self._flat([p.detach() for p in self.params])
        lo = self.rank * self.chunk
        self.shard = nn.Parameter(flat[lo: lo + self.chunk].clone().float())
        self.opt = torch.optim.Adam([self.shard], **adam)

    def _flat(self, tensors: list[torch.Tensor]) -> torch.Tensor:
        flat = torch.cat([t.reshape(-1).float() for t in tensors])
        return torch.nn.functional.pad(flat, (0, self.chunk * self.world - flat.numel()))

    def state_bytes(self) -> int:
        """Bytes of optimizer state this rank holds (Adam's two moments of its slice)."""
        return sum(t.numel() * t.element_size() for s in self.opt.state.values()
                   for t in s.values() if torch.is_tensor(t) and t.dim() > 0)

    @torch.no_grad()
    def step(self) -> None:
        grad = self._flat([p.grad for p in self.params])
        dist.all_reduce(grad, group=self.group)
        grad /= self.world
        lo = self.rank * self.chunk
        self.shard.grad = grad[lo: lo + self.chunk].clone()
        self.opt.step()
        parts = [torch.empty_like(self.shard) for _ in range(self.world)]
        dist.all_gather(parts, self.shard.detach(), group=self.group)
        flat = torch.cat(parts)[: self.total]
        offset = 0
        for p in self.params:
            p.copy_(flat[offset: offset + p.numel()].view_as(p))
            offset += p.numel()

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None


def _model(seed: int, hidden: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden))


def check_zero1(rank: int, world_size: int, steps: int = 5, hidden: int = 16, batch: int = 8,
                lr: float = 1e-2, seed: int = 0) -> dict[str, Any]:
    """Train the same model for `steps` Adam steps three ways on this rank's slice of each batch:
    plain DP (all-reduced gradients, full Adam on every rank), the course's ZeRO1 and torch's
    ZeroRedundancyOptimizer. Returns the largest relative parameter differences and the optimizer
    state bytes each rank holds."""
    from torch.distributed.optim import ZeroRedundancyOptimizer
    models = {k: _model(seed, hidden) for k in ("dp", "zero1", "torch_zero")}
    opts = {"dp": torch.optim.Adam(models["dp"].parameters(), lr=lr),
            "zero1": ZeRO1(models["zero1"].parameters(), lr=lr),
            "torch_zero": ZeroRedundancyOptimizer(models["torch_zero"].parameters(),
                                                  optimizer_class=torch.optim.Adam, lr=lr)}
    g = torch.Generator().manual_seed(seed + 1)
    for _ in range(steps):
        x, y = torch.randn(batch, hidden, generator=g), torch.randn(batch, hidden, generator=g)
        xs, ys = x.chunk(world_size)[rank], y.chunk(world_size)[rank]
        for k, model in models.items():
            loss = nn.functional.mse_loss(model(xs), ys)
            loss.backward()
            if k != "zero1":             # DP and torch's ZeRO: the gradients are averaged first
                for p in model.parameters():
                    dist.all_reduce(p.grad)
                    p.grad /= world_size
            opts[k].step()
            opts[k].zero_grad()

    @torch.no_grad()
    def diff(a: nn.Module, b: nn.Module) -> float:
        return max(float((p - q).abs().max() / q.abs().max()) for p, q in zip(a.parameters(), b.parameters()))

    dp_state = sum(t.numel() * t.element_size() for s in opts["dp"].state.values()
                   for t in s.values() if torch.is_tensor(t) and t.dim() > 0)
    moved = diff(models["dp"], _model(seed, hidden))
    return {"zero1_vs_dp": diff(models["zero1"], models["dp"]),
            "torch_zero_vs_dp": diff(models["torch_zero"], models["dp"]),
            "moved_from_init": moved, "state_bytes_dp": dp_state,
            "state_bytes_zero1": opts["zero1"].state_bytes()}


STAGE_NAMES = {0: "plain DP", 1: "ZeRO-1 (optimizer state)", 2: "ZeRO-2 (+ gradients)",
               3: "ZeRO-3 / FSDP (+ weights)"}


def stages_table(n_params: float, n_gpus: int) -> dict[str, dict[str, float]]:
    """{stage name: bytes per GPU by part} for stages 0-3 (the ZeRO memory widget's bars)."""
    return {STAGE_NAMES[s]: zero_bytes_per_gpu(n_params, n_gpus, s) for s in STAGES}


def explain_stages(table: dict[str, dict[str, float]], capacity_bytes: float) -> list[str]:
    """One line per stage: GiB per GPU, whether the training state fits, and the saving."""
    from ..narrate import fits, gib
    base = sum(next(iter(table.values())).values())
    out = []
    for name, parts in table.items():
        need = sum(parts.values())
        line = f"{name}: {gib(need):,.1f} GiB per GPU, {fits(need, capacity_bytes)}"
        if need < base:
            line += f", {base / need:,.1f}x less than plain DP"
        out.append(line)
    return out
