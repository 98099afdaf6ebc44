"""CUDA graphs for decoding: launch overhead, capture and replay, one graph per batch size.

A decode step at batch 1 is hundreds of tiny kernels; launched one by one from Python, the GPU
waits on the CPU. A CUDA graph records the launches once and replays them with one call. The
price: a graph replays exactly what it captured, the same shapes, the same memory addresses,
no host synchronisation. So `DecodeGraphRunner` keeps static input buffers and a static KV cache,
captures one graph per batch size (1, 2, 4, 8, ...) into one shared memory pool, and pads a batch
up to the next captured size.

What goes wrong in a capture, shown by running it, is `pitfalls.py` beside this module.
"""
from __future__ import annotations

import bisect
import contextlib
from typing import Callable, Sequence

import torch

from .. import bench
from ..models import llama, sampling
from ..device import default_device

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
    device = device or default_device()
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
    (pdl: launch them with programmatic dependent launch; None = where the GPU supports it);
    with weights="int8" or "int4" as well, its products read quantised weights (`quantised.py`,
    int4 in groups of `group_size`), and the prompt is run through that step too.
    On a CPU the step runs eagerly (`use_graphs` False; Triton kernels through the interpreter).
    Static state: the KV cache, the input buffers `tokens`/`positions`, the sampling noise, the
    output `next_tokens`. `step()` copies a batch into the buffers (padding it to a captured
    size), fills the noise outside the graph from a seeded generator, and replays the graph.
    """

    def __init__(self, model: llama.Transformer, max_batch: int = 8, max_seq: int = 512,
                 sizes: Sequence[int] | None = None, *, temperature: float = 0.0, top_k: int = 0,
                 top_p: float = 1.0, seed: int = 0, use_graphs: bool | None = None, fuse: bool | str = False,
                 kernels: str = "torch", pdl: bool | None = None, verbose: bool = True,
                 weights: str | None = None, group_size: int = 128):
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
        if weights is not None and kernels != "triton":
            raise ValueError(f"weights={weights!r} runs on the Triton step: pass kernels='triton'")
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
        if kernels == "triton" and weights is None:
            from .decode_kernels.step import TritonDecodeStep
            self.decode = TritonDecodeStep(model, pdl=pdl)
        elif kernels == "triton":   # int8 or int4 weights (quantised.py); its prompt runs on them too
            from .quantised import QuantisedDecodeStep
            self.decode = QuantisedDecodeStep(model, weights, group_size, pdl=pdl)
        self.weights = weights
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
            prefill = self.decode.prefill if self.weights is not None else self.model.prefill
            logits = prefill(padded, cache)[torch.arange(B, device=self.device), lens - 1]
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
