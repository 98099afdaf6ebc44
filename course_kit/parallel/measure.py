"""Measurements that run on every rank of a launched group (used by `course-kit bench parallel`
and notebook 09): the TP MLP against one GPU, and TP decode of the course model.

Each function checks correctness first and then times, with CUDA events on GPUs (host clocks on
CPU); the slowest rank's median is reported, since a collective is only done when all are.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import replace
from typing import Any, Callable

import torch
import torch.distributed as dist

from ..models import llama
from . import oneshot
from .comm import world
from .tensor import SwiGLU, TPSwiGLU
from .tp_llama import shard_llama

# Llama 3.1 8B's shape (random weights): large enough that one token's weights are 16 GB.
LLAMA3_8B = llama.ModelConfig(vocab_size=128256, dim=4096, n_layers=32, n_heads=32, n_kv_heads=8,
                              ffn_dim=14336, rope_theta=500000.0,
                              rope_scaling=dict(llama.LLAMA3_SCALING), max_seq_len=8192,
                              tie_embeddings=False, name="llama3-8b")


def model_config(name: str) -> llama.ModelConfig:
    """A course-model preset, or "llama3-8b"."""
    return replace(LLAMA3_8B) if name == "llama3-8b" else llama.ModelConfig.from_preset(name)


def _device() -> torch.device:
    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def time_calls(fn: Callable[[], Any], dev: torch.device, warmup: int, repeat: int) -> float:
    """Median seconds of fn() over `repeat` calls, the slowest rank's (ranks start together)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        if dist.is_initialized():
            dist.barrier()
        _sync(dev)
        if dev.type == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    med = torch.tensor([statistics.median(times)], dtype=torch.float64, device=dev)
    if dist.is_initialized():
        dist.all_reduce(med, op=dist.ReduceOp.MAX)
    return float(med.item())


@torch.inference_mode()
def mlp_on_rank(rank: int, world_size: int, hidden: int, ffn: int, tokens: int, dtype: str,
                warmup: int = 3, repeat: int = 10, seed: int = 0) -> dict[str, Any]:
    """The SwiGLU MLP on this group: one GPU unsharded (world 1) or TP over all ranks.

    Every rank builds the same full MLP (same seed) to check the TP output against it.
    """
    dev, dt = _device(), getattr(torch, dtype)
    torch.manual_seed(seed)
    with torch.device(dev):
        ref = SwiGLU(hidden, ffn).to(dt)
        x = torch.randn(tokens, hidden, dtype=dt)
    if world_size == 1:
        fn: Callable[[], Any] = lambda: ref(x)  # noqa: E731
        err = 0.0
    else:
        tp = TPSwiGLU(ref)
        y_ref = ref(x).float()
        err = float((tp(x).float() - y_ref).abs().max() / y_ref.abs().max())
        del ref, y_ref
        torch.cuda.empty_cache() if dev.type == "cuda" else None
        fn = lambda: tp(x)  # noqa: E731
    sec = time_calls(fn, dev, warmup, repeat)
    row = {"tp": world_size, "median_s": sec, "tflops": 6 * tokens * hidden * ffn / sec / 1e12,
           "max_rel_err": err}
    if world_size > 1:  # the same shard's matmuls without the all-reduce: what TP costs in comm
        g, u, d = tp.gate.weight, tp.up.weight, tp.down.weight
        row["compute_only_s"] = time_calls(
            lambda: torch.nn.functional.linear(
                torch.nn.functional.silu(x @ g.t()) * (x @ u.t()), d), dev, warmup, repeat)
    return row


def _build(name: str, dtype: torch.dtype, dev: torch.device, seed: int) -> llama.Transformer:
    model = llama.Transformer.from_config(model_config(name), seed=seed, dtype=dtype, device=dev)
    _, n = world()
    if n == 1:
        return model
    tp = shard_llama(model)
    del model
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return tp


def _graph(step: Callable[[], Any]) -> Any:
    """Capture step() in a CUDA graph (after warm-up on a side stream); None if it fails."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(s)
    # let earlier NCCL work finish, so NCCL's watchdog has nothing in flight during the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    try:  # other threads (NCCL's watchdog) may touch CUDA during capture: keep it thread-local
        ctx = torch.cuda.graph(g, capture_error_mode="thread_local")
    except TypeError:
        ctx = torch.cuda.graph(g)
    with ctx:
        step()
    return g


def _agree(ok: bool, dev: torch.device) -> bool:
    """True only if every rank says True (so all ranks take the same path afterwards)."""
    if not dist.is_initialized():
        return ok
    flag = torch.tensor([1 if ok else 0], device=dev)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag.item())


def _time_graph_mode(name: str, fn: Callable[[], None], run: Callable, modes: dict[str, float],
                     row: dict[str, Any], eager_tokens: list[int], dev: torch.device) -> None:
    """Capture fn in a CUDA graph (compiling first for compile modes) and time its replays."""
    graph, err = None, None
    try:
        if name.startswith("compile"):
            run(fn)                  # compiles (and warms up) outside the capture
        graph = _graph(fn)
    except Exception as e:  # noqa: BLE001 - record why, keep the other modes
        err = f"{type(e).__name__}: {e}"[:300]
    if not _agree(graph is not None, dev):
        row[f"{name}_error"] = err or "failed on another rank"
        return
    run(graph.replay)
    tokens, sec = run(graph.replay)
    modes[name] = sec
    row[f"{name}_tokens_equal_eager"] = tokens == eager_tokens
    del graph


def _triton_step(model: llama.Transformer, exchange: Any = "auto") -> Any:
    """The Triton decode step on this model (or shard), or None where Triton cannot run. On TP
    shards, exchange="auto" folds the sums into the products where it can (decode_kernels/exchange.py);
    None keeps an all-reduce kernel after each row-parallel product."""
    from ..attention.availability import triton_status
    if not triton_status()[0]:
        return None
    from ..cuda_graphs.decode_kernels.step import TritonDecodeStep
    return TritonDecodeStep(model, exchange=exchange)


class GreedyLoop:
    """Greedy decode of one sequence of `model` (or this rank's shard) from a prefilled static
    cache: `step_of(decode)` is one step in place (a graph can capture it), `run(fn)` times
    `new_tokens - 1` calls from the same start, every rank starting together."""

    def __init__(self, model: llama.Transformer, prompt_len: int, new_tokens: int, dt: torch.dtype,
                 dev: torch.device, seed: int = 0):
        cfg = model.config
        g = torch.Generator().manual_seed(seed)
        prompt = torch.randint(0, cfg.vocab_size, (1, prompt_len), generator=g).to(dev)
        self.cache = llama.StaticKVCache(cfg, 1, prompt_len + new_tokens + 8, dt, dev)
        self.first = model.prefill(prompt, self.cache)[:, -1].argmax(-1)
        self.tok = self.first.clone()
        self.pos = torch.full((1,), prompt_len, dtype=torch.long, device=dev)
        self.prompt_len, self.new_tokens, self.dev = prompt_len, new_tokens, dev

    def step_of(self, decode: Callable[..., torch.Tensor],
                pick: Callable[[torch.Tensor], torch.Tensor] = lambda x: x.argmax(-1)) -> Callable[[], None]:
        def step() -> None:
            self.tok.copy_(pick(decode(self.tok, self.pos, self.cache)))
            self.pos.add_(1)
        return step

    def run(self, fn: Callable[[], None]) -> tuple[list[int], float]:
        """(greedy tokens, seconds per call on this rank)."""
        self.tok.copy_(self.first)
        self.pos.fill_(self.prompt_len)
        out = [self.tok.clone()]
        if dist.is_initialized():
            dist.barrier()
        _sync(self.dev)
        t0 = time.perf_counter()
        for _ in range(self.new_tokens - 1):
            fn()
            out.append(self.tok.clone())
        _sync(self.dev)
        return torch.cat(out).tolist(), (time.perf_counter() - t0) / (self.new_tokens - 1)


@torch.no_grad()   # not inference_mode: the Triton step's greedy checks its logits' version counter
def decode_on_rank(rank: int, world_size: int, model_name: str, dtype: str, prompt_len: int = 16,
                   new_tokens: int = 64, use_graph: bool = True, use_compile: bool = False,
                   seed: int = 0) -> dict[str, Any]:
    """Greedy decode of batch 1: tokens and time per token in each mode that works here.

    Modes: eager; the step captured in a CUDA graph (GPUs); notebook 05's Triton step captured
    (GPUs; its tokens are also taken, uncaptured, when use_graph is False: the float32 check);
    torch.compile'd and captured (opt-in: it fuses the many small element-wise kernels of a
    decode step). World 1 runs the unsharded course model; larger worlds run its TP shards
    (shard_llama). There, in half precision on GPUs, the graph is timed once with NCCL's
    all-reduce (mode cuda_graph_nccl), then
    every graph mode uses the one-shot all-reduce of oneshot.py where symmetric memory works
    (row["all_reduce"] says which).
    """
    dev, dt = _device(), getattr(torch, dtype)
    if dt == torch.float32:  # the token check must be true fp32, not TF32
        torch.backends.cuda.matmul.allow_tf32 = False
    model = _build(model_name, dt, dev, seed)
    cfg = model.config
    loop = GreedyLoop(model, prompt_len, new_tokens, dt, dev, seed)
    make_step, run = loop.step_of, loop.run
    step = make_step(model.decode)
    eager_tokens, _ = run(step)          # warm-up (allocator, cuBLAS, NCCL)
    eager_tokens, eager_s = run(step)
    row: dict[str, Any] = {"model": model_name, "tp": world_size, "dtype": dtype,
                           "tokens": eager_tokens}
    modes: dict[str, float] = {"eager": eager_s}
    variants: list[tuple[str, Callable[[], None]]] = []
    triton_step = _triton_step(model) if dev.type == "cuda" else None
    if triton_step is not None and not use_graph:   # the check run: the Triton step's tokens too
        try:
            row["triton_tokens"], _ = run(make_step(triton_step, triton_step.greedy))
        except Exception as e:  # noqa: BLE001 - record why, keep the other modes
            row["triton_error"] = f"{type(e).__name__}: {e}"[:300]
    if use_graph and dev.type == "cuda":
        variants.append(("cuda_graph", step))
        if triton_step is not None:   # notebook 05's kernels (decode_kernels), on this rank's shard
            if world_size > 1:        # ... with an all-reduce kernel after each row-parallel product
                reducing = _triton_step(model, exchange=None)
                variants.append(("triton_graph_all_reduce", make_step(reducing, reducing.greedy)))
            variants.append(("triton_graph", make_step(triton_step, triton_step.greedy)))
            if world_size > 1:
                from ..cuda_graphs.decode_kernels import exchange
                row["triton_exchange"] = "folded" if triton_step.exchange is not None else exchange.why_not_folded
    if use_compile and dev.type == "cuda":
        try:
            compiled = torch.compile(model.decode, dynamic=False)
            variants.append(("compile_cuda_graph", make_step(compiled)))
        except Exception as e:  # noqa: BLE001
            row["compile_cuda_graph_error"] = f"{type(e).__name__}: {e}"[:300]
    fast = None
    for name, fn in variants:
        if name == "cuda_graph" and world_size > 1 and dt != torch.float32:
            # NCCL's ring first, then the one-shot all-reduce (oneshot.py) for every mode after
            _time_graph_mode("cuda_graph_nccl", fn, run, modes, row, eager_tokens, dev)
            fast = oneshot.enable_one_shot_all_reduce(max_numel=cfg.dim * 8, dtype=dt, device=dev)
            row["all_reduce"] = "one_shot" if fast is not None else "nccl"
        _time_graph_mode(name, fn, run, modes, row, eager_tokens, dev)
    if fast is not None:
        oneshot.disable_one_shot_all_reduce()
    if triton_step is not None and triton_step.exchange is not None:
        try:
            triton_step.exchange.check()
        except RuntimeError as e:   # a rank gave up waiting: its tokens are wrong, and say why
            row["triton_exchange_error"] = str(e)[:300]
    # the slowest rank's time per mode (the same key order on every rank)
    secs = torch.tensor(list(modes.values()), dtype=torch.float64, device=dev)
    if dist.is_initialized():
        dist.all_reduce(secs, op=dist.ReduceOp.MAX)
    row["s_per_token_by_mode"] = dict(zip(modes, secs.tolist()))
    row["mode"] = min(row["s_per_token_by_mode"], key=row["s_per_token_by_mode"].get)
    row["s_per_token"] = row["s_per_token_by_mode"][row["mode"]]
    row["tokens_per_s"] = 1.0 / row["s_per_token"]
    del model, loop
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return row
