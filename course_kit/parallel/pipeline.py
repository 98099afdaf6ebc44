"""Pipeline parallelism: consecutive layers on consecutive ranks, fed with micro-batches.

Rank r holds stage r. A micro-batch's activations flow forward from rank to rank, and its
gradients flow back. A rank waits while the pipeline fills and drains: with p stages and m
micro-batches, forward and backward steps of equal length, the idle ("bubble") fraction is
(p-1)/(m+p-1) for both schedules below.

- GPipe: all m forwards, then all m backwards; every rank keeps m micro-batches of activations.
- 1F1B: p-r-1 warm-up forwards, then one forward / one backward alternately, then the
  remaining backwards; rank r keeps at most p-r micro-batches of activations.
"""
from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from . import schedules

SCHEDULES = ("gpipe", "1f1b")


def schedule(kind: str, p: int, m: int, rank: int) -> list[tuple[str, int]]:
    """The ordered actions ("F" or "B", micro-batch) of stage `rank` of `p`, for m micro-batches
    (schedules.actions, without the model chunk: the real pipeline has one chunk per rank)."""
    if kind not in SCHEDULES:
        raise ValueError(f"schedule={kind!r}; choose one of {SCHEDULES}")
    if not (p >= 1 and m >= 1 and 0 <= rank < p):
        raise ValueError(f"need p >= 1, m >= 1 and 0 <= rank < p; got p={p}, m={m}, rank={rank}")
    return [(k, i) for k, i, _ in schedules.actions(kind, p, m, rank)]


def bubble_theory(p: int, m: int) -> float:
    """GPipe's bubble fraction (p-1)/(m+p-1)."""
    if p < 1 or m < 1:
        raise ValueError(f"need p >= 1 and m >= 1; got p={p}, m={m}")
    return schedules.bubble_theory(p, m)


def simulate(kind: str, p: int, m: int, t_f: float = 1.0, t_b: float = 2.0) -> list[dict]:
    """Timeline of the schedule with fixed step costs and free communication (schedules.simulate).

    Each action starts when its rank is free and its input is ready (the previous stage's
    forward, or the next stage's backward). Returns events {rank, kind, mb, chunk, start, end}.
    """
    if kind not in SCHEDULES:
        raise ValueError(f"schedule={kind!r}; choose one of {SCHEDULES}")
    return schedules.simulate(kind, p, m, 1, t_f, t_b)


bubble_of = schedules.bubble_of
peak_in_flight = schedules.peak_in_flight


# --------------------------------------------------------------------- the real pipeline

class Block(nn.Module):
    """A residual MLP block: x + W2 gelu(W1 norm(x))."""

    def __init__(self, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.fc1, self.fc2 = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(nn.functional.gelu(self.fc1(self.norm(x))))


def build_model(n_layers: int, hidden: int, seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(*[Block(hidden) for _ in range(n_layers)])


def stage_of(model: nn.Sequential, rank: int, p: int) -> nn.Sequential:
    """Layers [rank*L/p, (rank+1)*L/p) of the model."""
    n = len(model)
    if n % p:
        raise ValueError(f"{n} layers do not split evenly over {p} stages")
    return model[rank * n // p: (rank + 1) * n // p]


class _P2P:
    """Point-to-point messages paired the way Megatron-LM pairs them.

    A send is held back until the next receive: if that receive is from the same peer, both go
    out in one batch (send activation + receive gradient, or send gradient + receive activation).
    Without the pairing, two neighbours that each send before they receive can wait on each
    other forever with NCCL, where a large send only completes when its receive is posted.
    A send is held only when the rank's next action receives from the same peer (hold=True):
    otherwise it leaves at once. Held until some later message, it would wait for the rank's next
    step to be computed: the 2x H200 record of GPipe shows each activation and gradient arriving
    about one step late that way (bubble.handoff_delays).
    """

    def __init__(self) -> None:
        self.pending: tuple[torch.Tensor, int] | None = None
        self.works: list[Any] = []

    def flush(self) -> None:
        if self.pending is not None:
            t, peer = self.pending
            self.works += dist.batch_isend_irecv([dist.P2POp(dist.isend, t, peer)])
            self.pending = None

    def send(self, t: torch.Tensor, peer: int, hold: bool = True) -> None:
        self.flush()
        self.pending = (t.contiguous(), peer)
        if not hold:
            self.flush()

    def recv(self, buf: torch.Tensor, peer: int) -> torch.Tensor:
        ops = [dist.P2POp(dist.irecv, buf, peer)]
        if self.pending is not None and self.pending[1] == peer:
            ops.insert(0, dist.P2POp(dist.isend, *self.pending))
            self.pending = None
        else:
            self.flush()
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        return buf

    def finish(self) -> None:
        self.flush()
        for w in self.works:
            w.wait()
        self.works = []


def run_pipeline(stage: nn.Module, x: torch.Tensor | None, y: torch.Tensor | None, m: int,
                 kind: str = "1f1b", hidden: int | None = None,
                 batch: int | None = None) -> tuple[torch.Tensor | None, list[dict]]:
    """One training step of the pipeline on this rank: forwards and backwards of m micro-batches.

    Rank 0 gets the inputs `x`, the last rank the targets `y` (loss: mean squared error, averaged
    over the whole batch). Returns (loss on the last rank else None, compute events with host
    times: each starts once its input has arrived).
    """
    rank, p = dist.get_rank(), dist.get_world_size()
    dev = next(stage.parameters()).device
    dtype = next(stage.parameters()).dtype
    if x is not None:
        batch, hidden = x.shape
    if batch is None or hidden is None or batch % m:
        raise ValueError(f"batch={batch} must be given and divisible by m={m}")
    mb = batch // m
    xs = x.chunk(m) if x is not None else None
    ys = y.chunk(m) if y is not None else None
    inputs: dict[int, torch.Tensor] = {}
    outputs: dict[int, torch.Tensor] = {}
    comm = _P2P()
    events: list[dict] = []
    loss_total = torch.zeros((), device=dev, dtype=dtype)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    plan = schedule(kind, p, m, rank)

    def recv_peer(j: int) -> int | None:
        """The peer action j receives from (None: no receive, or no action j)."""
        if j >= len(plan):
            return None
        if plan[j][0] == "F":
            return rank - 1 if rank > 0 else None
        return rank + 1 if rank < p - 1 else None

    for j, (k, i) in enumerate(plan):
        if k == "F":
            if rank == 0:
                inp = xs[i].clone().requires_grad_()
            else:
                inp = comm.recv(torch.empty(mb, hidden, device=dev, dtype=dtype), rank - 1)
                inp.requires_grad_()
            sync()
            t0 = time.perf_counter()
            out = stage(inp)
            if rank == p - 1:
                out = nn.functional.mse_loss(out, ys[i], reduction="sum") / ys[i].numel() / m
            sync()
            t1 = time.perf_counter()
            inputs[i], outputs[i] = inp, out
            if rank < p - 1:
                comm.send(out.detach(), rank + 1, hold=recv_peer(j + 1) == rank + 1)
        else:
            grad = None
            if rank < p - 1:
                grad = comm.recv(torch.empty(mb, hidden, device=dev, dtype=dtype), rank + 1)
            sync()
            t0 = time.perf_counter()
            outputs[i].backward(grad)
            sync()
            t1 = time.perf_counter()
            if rank == p - 1:
                loss_total += outputs[i].detach()
            if rank > 0:
                comm.send(inputs[i].grad, rank - 1, hold=recv_peer(j + 1) == rank - 1)
            del inputs[i], outputs[i]  # this micro-batch's activations are freed now
        events.append({"rank": rank, "kind": k, "mb": i, "start": t0, "end": t1})
    comm.finish()
    return (loss_total if rank == p - 1 else None), events


def check_pp(rank: int, world_size: int, n_layers: int = 4, hidden: int = 32, batch: int = 16,
             m: int = 4, seed: int = 0) -> dict[str, Any]:
    """Loss and gradients of both schedules against one process running the whole model."""
    torch.manual_seed(seed + 1)
    x, y = torch.randn(batch, hidden), torch.randn(batch, hidden)
    ref = build_model(n_layers, hidden, seed)
    ref_loss = nn.functional.mse_loss(ref(x), y)
    ref_loss.backward()
    ref_grads = [q.grad for q in stage_of(ref, rank, world_size).parameters()]
    out: dict[str, Any] = {}
    for kind in SCHEDULES:
        stage = stage_of(build_model(n_layers, hidden, seed), rank, world_size)
        loss, _ = run_pipeline(stage, x if rank == 0 else None, y if rank == world_size - 1 else None,
                               m, kind, hidden=hidden, batch=batch)
        if loss is not None:
            out[f"{kind}_loss"] = float((loss - ref_loss.detach()).abs() / ref_loss.detach().abs())
        out[f"{kind}_grads"] = max(float((a - q.grad).abs().max() / a.abs().max())
                                   for a, q in zip(ref_grads, stage.parameters()))
    return out


def measure_pp(rank: int, world_size: int, kind: str = "1f1b", m: int = 4, n_layers: int = 4,
               hidden: int = 256, batch: int = 256, repeat: int = 3,
               seed: int = 0) -> list[dict]:
    """Real timelines of a few steps (the last one returned), times relative to its start."""
    dev = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" \
        else torch.device("cpu")
    with torch.device(dev):  # initialised where it runs (a CPU init of a big model is slow)
        stage = stage_of(build_model(n_layers, hidden, seed), rank, world_size)
    torch.manual_seed(seed + 1)
    x = torch.randn(batch, hidden, device=dev)
    y = torch.randn(batch, hidden, device=dev)
    events: list[dict] = []
    for _ in range(repeat):
        dist.barrier()
        t_start = time.perf_counter()
        _, events = run_pipeline(stage, x if rank == 0 else None,
                                 y if rank == world_size - 1 else None, m, kind,
                                 hidden=hidden, batch=batch)
        for e in events:
            e["start"] -= t_start
            e["end"] -= t_start
    gathered: list[Any] = [None] * world_size
    dist.all_gather_object(gathered, events)
    return [e for evs in gathered for e in evs]
