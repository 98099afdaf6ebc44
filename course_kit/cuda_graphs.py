"""CUDA graphs for decoding: launch overhead, capture and replay, one graph per batch size.

A decode step at batch 1 is hundreds of tiny kernels; launched one by one from Python, the GPU
waits on the CPU. A CUDA graph records the launches once and replays them with one call. The
price: a graph replays exactly what it captured, the same shapes, the same memory addresses,
no host synchronisation. So `DecodeGraphRunner` keeps static input buffers and a static KV cache,
captures one graph per batch size (1, 2, 4, 8, ...) into one shared memory pool, and pads a batch
up to the next captured size.

`python -m course_kit.cuda_graphs --pitfalls` runs the pitfall demonstrations in a process of
their own (a broken capture must not poison the notebook's CUDA context) and prints JSON.
"""
from __future__ import annotations

import bisect
import contextlib
import json
import random
import subprocess
import sys
from typing import Callable, Sequence

import torch

from . import bench
from .models import llama, sampling

CPU_MESSAGE = ("CUDA graphs need a CUDA GPU; on this machine DecodeGraphRunner runs the same padded "
               "decode step eagerly (no capture, no replay).")


KERNELS = ("torch", "triton")   # the model's own decode step, or decode_kernels.TritonDecodeStep


# ----------------------------------------------------------------------------- picking a graph

def capture_sizes(max_batch: int) -> list[int]:
    """1, 2, 4, 8, ... up to max_batch (which is always included)."""
    if max_batch < 1:
        raise ValueError(f"max_batch must be >= 1, got {max_batch}")
    sizes = [1 << i for i in range(max_batch.bit_length()) if 1 << i < max_batch]
    return sizes + [max_batch]


def pick_graph(batch: int, sizes: Sequence[int]) -> int:
    """The smallest captured size that holds `batch` rows."""
    ordered = sorted(sizes)
    if not 1 <= batch <= ordered[-1]:
        raise ValueError(f"batch {batch} is outside [1, {ordered[-1]}] (the captured sizes {ordered})")
    return ordered[bisect.bisect_left(ordered, batch)]


def padding_plan(batches: Sequence[int], sizes: Sequence[int]) -> list[dict]:
    """For each batch size: the graph replayed, the padding rows, and the fraction of work wasted."""
    plan = []
    for b in batches:
        g = pick_graph(b, sizes)
        plan.append({"batch": b, "graph": g, "padding": g - b, "wasted": (g - b) / g})
    return plan


# ----------------------------------------------------------------------------- launch overhead

def launch_overhead(n_kernels: int = 1000, repeat: int = 20, device: str | None = None) -> dict:
    """N tiny kernels (an in-place add on 1 element) launched eagerly, against one graph replay."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    x = torch.zeros(1, device=device)

    def eager():
        for _ in range(n_kernels):
            x.add_(1.0)
    t_eager = bench.timeit(eager, warmup=2, repeat=repeat, device=device)
    out = {"n_kernels": n_kernels, "device": device,
           "eager_us_per_kernel": t_eager.median_s / n_kernels * 1e6, "eager": t_eager.as_dict()}
    if device != "cuda":
        out.update(graph_us_per_kernel=None, replay_us=None, ratio=None)
        return out
    graph = capture(eager)
    before = x.item()
    graph.replay()
    torch.cuda.synchronize()
    if x.item() != before + n_kernels:  # a replay really runs all N kernels
        raise AssertionError(f"one replay added {x.item() - before}, expected {n_kernels}")
    t_graph = bench.timeit(graph.replay, warmup=2, repeat=repeat, device=device)
    out.update(graph_us_per_kernel=t_graph.median_s / n_kernels * 1e6, replay_us=t_graph.median_s * 1e6,
               graph=t_graph.as_dict(), ratio=t_eager.median_s / t_graph.median_s)
    return out


def capture(fn: Callable[[], object], pool=None, warmup: int = 2) -> "torch.cuda.CUDAGraph":
    """Warm up `fn` on a side stream (lazy inits, autotuning, allocator), then capture one call."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        fn()
    return graph


# ----------------------------------------------------------------------------- fusion

def fuse_layers(model: llama.Transformer, enable: bool = True, backend: str = "inductor") -> None:
    """Compile each transformer block with Inductor (regional compilation), or undo it.

    Every block has the same code and shapes, so one compiled graph per batch size serves all
    layers: the compile costs one layer, not the whole model. Inductor fuses the norms, RoPE and
    activations into a few kernels, which is what the graph then replays.
    """
    for layer in model.layers:
        if enable:
            layer.compile(dynamic=False, backend=backend)
        else:
            layer._compiled_call_impl = None  # back to the eager module
    if enable:
        cfg = torch._dynamo.config  # one cache entry per captured batch size
        cfg.cache_size_limit = max(cfg.cache_size_limit, 16)


def _eager_only(active: bool):
    """Run compiled layers eagerly inside this block (torch >= 2.6; a no-op before)."""
    stance = getattr(torch.compiler, "set_stance", None)
    if active and stance is not None:
        return stance("force_eager")
    return contextlib.nullcontext()


# ----------------------------------------------------------------------------- the runner

class DecodeGraphRunner:
    """Batched decode through one captured CUDA graph per batch size.

    Capture happens in the constructor, before any prefill (warm-up writes into cache rows).
    fuse=True first compiles each block with Inductor (`fuse_layers`; a string names another
    torch.compile backend), so the graph replays fused kernels. kernels="triton" replaces the
    model's decode with `decode_kernels.TritonDecodeStep`, a few hand-fused Triton kernels a layer
    (pdl: launch them with programmatic dependent launch; None = where the GPU supports it).
    On a CPU the step runs eagerly (`use_graphs` False; Triton kernels through the interpreter).
    Static state: the KV cache, the input buffers `tokens`/`positions`, the sampling noise, the
    output `next_tokens`. `step()` copies a batch into the buffers (padding it to a captured
    size), fills the noise outside the graph from a seeded generator, and replays the graph.
    """

    def __init__(self, model: llama.Transformer, max_batch: int = 8, max_seq: int = 512,
                 sizes: Sequence[int] | None = None, *, temperature: float = 0.0, top_k: int = 0,
                 top_p: float = 1.0, seed: int = 0, use_graphs: bool | None = None, fuse: bool | str = False,
                 kernels: str = "torch", pdl: bool | None = None, verbose: bool = True):
        weight = model.tok_embeddings.weight
        self.model, self.device = model, weight.device
        self.sizes = sorted(sizes or capture_sizes(max_batch))
        if self.sizes[0] < 1 or self.sizes[-1] > max_batch:
            raise ValueError(f"captured sizes {self.sizes} must lie in [1, max_batch={max_batch}]")
        self.use_graphs = self.device.type == "cuda" if use_graphs is None else use_graphs
        if self.use_graphs and self.device.type != "cuda":
            raise ValueError(f"use_graphs=True needs the model on a CUDA device, not {self.device}")
        if verbose and self.device.type != "cuda":
            print(CPU_MESSAGE)
        sampling.filter_logits(torch.zeros(1, model.config.vocab_size), top_k, top_p)  # validates
        if kernels not in KERNELS:
            raise ValueError(f"kernels must be one of {KERNELS}, got {kernels!r}")
        if fuse and kernels != "torch":
            raise ValueError("fuse compiles the model's own layers; kernels='triton' replaces them: choose one")
        if kernels == "triton":
            from .decode_kernels.gemv import MAX_ROWS
            if self.sizes[-1] > MAX_ROWS:
                raise ValueError(f"kernels='triton' runs batches of at most {MAX_ROWS} rows, got a captured "
                                 f"size of {self.sizes[-1]}")
        self.temperature, self.top_k, self.top_p = temperature, top_k, top_p
        self.cache = llama.StaticKVCache(model.config, max_batch, max_seq, weight.dtype, self.device)
        self.tokens = torch.zeros(max_batch, dtype=torch.long, device=self.device)
        self.positions = torch.zeros(max_batch, dtype=torch.long, device=self.device)
        self.noise = torch.rand(max_batch, model.config.vocab_size, device=self.device)
        self.next_tokens = torch.zeros(max_batch, dtype=torch.long, device=self.device)
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.kernels, self.decode = kernels, model.decode
        if kernels == "triton":
            from .decode_kernels.step import TritonDecodeStep
            self.decode = TritonDecodeStep(model, pdl=pdl)
        self.fused = bool(fuse)
        if fuse:
            fuse_layers(model, backend=fuse if isinstance(fuse, str) else "inductor")
        if self.use_graphs:
            self.capture_all()

    def _body(self, b: int) -> None:
        """The captured work for batch size b: decode, then graph-safe sampling (noise passed in)."""
        logits = self.decode(self.tokens[:b], self.positions[:b], self.cache)
        noise = self.noise[:b] if self.temperature > 0 else None
        if self.kernels == "triton" and self.temperature == 0:
            self.decode.greedy(logits, out=self.next_tokens[:b])    # written in place: no copy kernel
        else:
            chosen = sampling.sample(logits, self.temperature, self.top_k, self.top_p, uniform=noise)
            self.next_tokens[:b].copy_(chosen)

    @torch.no_grad()
    def capture_all(self) -> None:
        """Largest size first: it sizes the shared pool, and the smaller graphs reuse its memory."""
        pool = torch.cuda.graph_pool_handle()
        for b in sorted(self.sizes, reverse=True):
            self.graphs[b] = capture(lambda b=b: self._body(b), pool=pool)
        torch.cuda.synchronize()

    @torch.no_grad()
    def step(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """One decode step for B sequences in cache rows 0..B-1 -> their next tokens [B] (a copy)."""
        B = tokens.shape[0]
        b = pick_graph(B, self.sizes)
        self.tokens[:B].copy_(tokens)
        self.positions[:B].copy_(positions)
        self.tokens[B:b].zero_()      # padding rows: token 0 at position 0 of unused cache rows
        self.positions[B:b].zero_()
        if self.temperature > 0:
            self.noise[:b].uniform_(generator=self.generator)  # outside the graph: seeded, fresh
        if self.use_graphs:
            self.graphs[b].replay()
        else:
            self._body(b)
        return self.next_tokens[:B].clone()  # the buffer is overwritten by the next replay

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
        """Prefill eagerly, then decode through the graphs; one host sync, at the end."""
        B, cache = len(prompts), self.cache
        if not 1 <= B <= cache.max_batch:
            raise ValueError(f"number of prompts {B} is outside [1, {cache.max_batch}] (max_batch)")
        if any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        longest = max(len(p) for p in prompts)
        if longest + max_new_tokens > cache.max_seq:
            raise ValueError(f"prompt length {longest} + {max_new_tokens} new tokens exceeds max_seq {cache.max_seq}")
        lens = torch.tensor([len(p) for p in prompts], device=self.device)
        padded = torch.zeros(B, longest, dtype=torch.long, device=self.device)
        for i, p in enumerate(prompts):
            padded[i, :len(p)] = torch.tensor(p, device=self.device)
        with _eager_only(self.fused):  # prefill shapes vary: do not compile a layer for each
            logits = self.model.prefill(padded, cache)[torch.arange(B, device=self.device), lens - 1]
        noise = torch.rand(logits.shape, generator=self.generator, device=self.device)
        token = sampling.sample(logits, self.temperature, self.top_k, self.top_p, uniform=noise)
        out = torch.empty(B, max_new_tokens, dtype=torch.long, device=self.device)
        positions = lens.clone()
        for t in range(max_new_tokens):
            out[:, t] = token
            if t + 1 < max_new_tokens:
                token = self.step(token, positions)
                positions += 1
        return out.tolist()


def eager_generate(model: llama.Transformer, prompts: list[list[int]], max_new_tokens: int,
                   max_seq: int = 512, max_batch: int | None = None) -> list[list[int]]:
    """Greedy decoding with the same padded step, eagerly: the oracle for graph replay.

    Give it the runner's max_batch and max_seq so both run kernels of the same shapes."""
    runner = DecodeGraphRunner(model, max_batch=max_batch or len(prompts), max_seq=max_seq,
                               use_graphs=False, verbose=False)
    return runner.generate(prompts, max_new_tokens)


def reduce_overhead_step(model: llama.Transformer, cache: llama.StaticKVCache) -> Callable:
    """`torch.compile(mode="reduce-overhead")` on the same decode step (Inductor + CUDA graph trees).

    The cache is mutated in place; marking it static tells the graph trees its address never
    changes, so they capture instead of skipping cudagraphs for a mutated input.
    """
    torch._dynamo.mark_static_address(cache.k)
    torch._dynamo.mark_static_address(cache.v)
    compiled = torch.compile(model.decode, mode="reduce-overhead")
    return lambda tokens, positions: compiled(tokens, positions, cache)


# ----------------------------------------------------------------------------- pitfalls

PITFALLS = [
    {"pitfall": "CPU sync inside capture",
     "what goes wrong": "`.item()`, `print(tensor)`, `if tensor:` wait for the GPU, which a stream "
                        "being captured cannot do: capture fails with a CUDA error.",
     "fix": "keep the step sync-free: decisions on the device (torch.where, masks), read results after replay"},
    {"pitfall": "dynamic shapes",
     "what goes wrong": "a graph replays fixed shapes and addresses; a new input tensor is silently "
                        "ignored and the output is computed from the old buffer.",
     "fix": "copy inputs into static buffers; capture one graph per batch size and pad to it"},
    {"pitfall": "allocation during capture",
     "what goes wrong": "tensors created inside the capture live in the graph's private pool and are "
                        "rewritten by every replay; an output kept from an earlier replay changes.",
     "fix": "copy (clone) outputs you keep; share one pool between graphs that never run at once"},
    {"pitfall": "RNG",
     "what goes wrong": "randomness drawn on the CPU (Python or torch CPU generators) runs once, at "
                        "capture: every replay reuses the same 'random' number.",
     "fix": "draw on the device (PyTorch advances the graph's Philox offset per replay) or pass noise "
            "in through a static buffer filled from a seeded generator before each replay"},
]


def _one_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0] if lines else ''}".strip()


def first_error(err: BaseException) -> tuple[str, str | None]:
    """(the first error of a chain, the one finally raised if it differs).

    A sync inside `torch.cuda.graph(...)` fails first with "operation not permitted when stream is
    capturing"; leaving the `with` block then ends the capture, which fails again ("operation failed
    due to a previous error during capture") and that second error is the one Python raises, with
    the first as its `__context__`. The first one is the lesson, so it is the one reported.
    """
    chain, seen = [err], {id(err)}
    while True:
        nxt = chain[-1].__cause__ or chain[-1].__context__
        if nxt is None or id(nxt) in seen:
            break
        chain.append(nxt)
        seen.add(id(nxt))
    first, last = _one_line(chain[-1]), _one_line(err)
    return first, (last if last != first else None)


def _try_capture(fn: Callable[[], object]) -> dict:
    """Capture fn; return {"error": first error, "then": the error raised at the end} ({} if it worked)."""
    try:
        capture(fn, warmup=0)
        return {"error": None}
    except Exception as err:  # noqa: BLE001 - the error is the demonstration
        try:
            torch.cuda.synchronize()
        except Exception:  # noqa: BLE001 - the context may stay broken; this process ends soon
            pass
        first, then = first_error(err)
        return {"error": first, **({"then, when the capture ends": then} if then else {})}


def _pitfall_cpu_sync() -> dict:
    x = torch.ones(4, device="cuda")

    def syncing():
        y = x * 2
        if y.sum().item() > 0:  # `.item()` waits for the GPU: a host sync
            y += 1
    return _try_capture(syncing)


def _pitfall_dynamic_shapes() -> dict:
    static_in = torch.ones(4, device="cuda")
    out: dict = {}
    g = capture(lambda: out.__setitem__("y", static_in * 2))
    keep_alive = static_in  # the graph still reads this buffer; it must not be freed
    static_in = torch.full((3,), 5.0, device="cuda")  # a new batch of 3: rebinding a Python name
    g.replay()
    torch.cuda.synchronize()
    del keep_alive
    return {"expected": (static_in * 2).tolist(), "found": out["y"].tolist(),
            "wrong": out["y"].shape != static_in.shape}


def _pitfall_allocation() -> dict:
    buf = torch.ones(4, device="cuda")
    res: dict = {}
    g = capture(lambda: res.__setitem__("y", buf * 10))  # y is allocated inside the capture
    g.replay()
    kept = res["y"]
    first = kept.tolist()
    buf.fill_(7.0)
    g.replay()
    torch.cuda.synchronize()
    return {"kept_after_replay_1": first, "same_tensor_after_replay_2": kept.tolist(),
            "wrong": kept.tolist() != first}


def _pitfall_rng() -> dict:
    base = torch.zeros(4, device="cuda")
    cpu_out: dict = {}
    dev_out: dict = {}
    g_cpu = capture(lambda: cpu_out.__setitem__("y", base + random.random()), warmup=0)
    g_dev = capture(lambda: dev_out.__setitem__("y", base + torch.rand(4, device="cuda")), warmup=0)
    draws_cpu, draws_dev = [], []
    for _ in range(3):
        g_cpu.replay()
        g_dev.replay()
        draws_cpu.append(round(cpu_out["y"][0].item(), 6))
        draws_dev.append(round(dev_out["y"][0].item(), 6))
    return {"cpu_rng_replays": draws_cpu, "device_rng_replays": draws_dev,
            "wrong": len(set(draws_cpu)) == 1 and len(set(draws_dev)) == 3}


_DEMOS = {"CPU sync inside capture": _pitfall_cpu_sync, "dynamic shapes": _pitfall_dynamic_shapes,
          "allocation during capture": _pitfall_allocation, "RNG": _pitfall_rng}
# the failing capture runs last: whatever state it leaves cannot spoil the other demonstrations
_ORDER = ["dynamic shapes", "allocation during capture", "RNG", "CPU sync inside capture"]


def demonstrate_pitfalls() -> dict:
    found = {}
    for name in _ORDER:
        try:
            found[name] = _DEMOS[name]()
        except Exception as err:  # noqa: BLE001 - report and go on
            found[name] = {"demo_failed": f"{type(err).__name__}: {err}"[:300]}
    return found


def run_pitfalls(timeout_s: float = 180) -> list[dict]:
    """The pitfalls demonstrated on the GPU, in a fresh process (a failed capture can leave the
    CUDA context unusable, so never in the notebook's own); on a CPU, the explanations only."""
    if not torch.cuda.is_available():
        return [dict(p) for p in PITFALLS]
    try:
        proc = subprocess.run([sys.executable, "-m", "course_kit.cuda_graphs", "--pitfalls"],
                              capture_output=True, text=True, timeout=timeout_s)
        lines = proc.stdout.strip().splitlines()
        found = json.loads(lines[-1]) if proc.returncode == 0 and lines else {}
        failed = None if found else (proc.stderr.strip().splitlines() or ["no output"])[-1]
    except Exception as err:  # noqa: BLE001 - report, do not stop the run
        found, failed = {}, repr(err)
    return [{**p, **found.get(p["pitfall"], {"demo_failed": failed})} for p in PITFALLS]


if __name__ == "__main__" and "--pitfalls" in sys.argv:
    print(json.dumps(demonstrate_pitfalls()))
