"""bench woq's measurements (a helper of benchmarks/woq.py): the step's products one by one, torch's
peers at several batch sizes, and the decode runners.

Every product is first checked against the fp32 matmul of its dequantised weights, then timed on
copies of its weights rotated past the L2 cache. On a GPU a product's calls are captured back to
back in one CUDA graph and launched as the step launches them (PDL where the GPU has it), so a small
product's time is its own and not a launch's; the peers are timed call by call, as a user calls them.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Callable

import torch
import torch.nn.functional as F

from .. import bench
from ..cuda_graphs import runner as cg
from ..cuda_graphs.decode_kernels import gemv as G, qkv_rope as QR, woq_gemv as W
from ..cuda_graphs.quantised import bf16_bytes_per_token, int4_path
from ..dtypes import woq
from ..models import llama
from .cuda_graphs import keys_attended, prompts_for, time_steps

KINDS = ("wqkv", "wo", "w13", "w2", "head")
ROTATE_BYTES = 128 * 2**20       # copies of a weight until they fill 128 MiB (the H200's L2 is 50 MB)
MAX_COPIES = 64
CHECK_TOLERANCE = 2e-2           # relative to the largest value: bf16 output rounding and fp32 sums


def copies_for(nbytes: int) -> int:
    return max(1, min(MAX_COPIES, math.ceil(ROTATE_BYTES / max(1, nbytes))))


def _clone(w: torch.Tensor | W.QuantWeight):
    return replace(w, words=w.words.clone(), scales=w.scales.clone()) if isinstance(w, W.QuantWeight) else w.clone()


def _rel(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.float() - want.float()).abs().max() / want.float().abs().max().clamp_min(1e-30)).item()


class _Bench:
    """The inputs every product of one model shares: x, h, o, a small cache, positions, the norms."""

    def __init__(self, step, pdl: bool):
        model, self.model, self.pdl = step.model, step.model, pdl
        cfg, dev, dt = model.config, step.device, model.tok_embeddings.weight.dtype
        g = torch.Generator(device="cpu").manual_seed(3)
        self.x = torch.randn(1, cfg.dim, generator=g).to(device=dev, dtype=dt)
        self.h = torch.randn(1, cfg.ffn_dim, generator=g).to(device=dev, dtype=dt)
        self.o = torch.randn(1, cfg.n_heads * cfg.head_dim, generator=g).to(device=dev, dtype=dt)
        self.kc = torch.zeros(1, cfg.n_kv_heads, 64, cfg.head_dim, dtype=dt, device=dev)
        self.vc = torch.zeros_like(self.kc)
        self.pos = torch.full((1,), 5, device=dev)
        self.layer, self.eps = model.layers[0], cfg.norm_eps

    def call(self, kind: str, w, quantised: bool) -> Callable[[], torch.Tensor]:
        """The product `kind` as the step calls it (same options, so the same compiled kernel)."""
        gemv_fn = W.woq_gemv if quantised else G.gemv
        lay, pdl, eps = self.layer, self.pdl, self.eps
        if kind == "wqkv":
            qkv = W.woq_qkv_rope if quantised else QR.qkv_rope
            return lambda: qkv(w, self.x, lay.attention_norm.weight, eps, self.pos, self.model.inv_freq, self.kc,
                               self.vc, self.model.config.n_heads, pdl=pdl)
        if kind == "wo":
            return lambda: gemv_fn(w, self.o, residual=self.x, out=self.x, pdl=pdl)
        if kind == "w13":
            return lambda: gemv_fn(w, self.x, prologue="norm", norm_weight=lay.ffn_norm.weight, eps=eps, pdl=pdl,
                                   epilogue="swiglu")
        if kind == "w2":
            return lambda: gemv_fn(w, self.h, residual=self.x, out=self.x, pdl=pdl)
        bufs = W.argmax_buffers(w, 1) if quantised else G.argmax_buffers(w, 1)
        return lambda: gemv_fn(w, self.x, prologue="norm", norm_weight=self.model.norm.weight, eps=eps, pdl=pdl,
                               argmax_into=bufs)


def model_weight(model, kind: str) -> torch.Tensor:
    """The model's own weight for product `kind` of layer 0, or the head."""
    mod = model.layers[0]
    return {"wqkv": mod.attention.wqkv.weight, "wo": mod.attention.wo.weight, "w13": mod.feed_forward.w13.weight,
            "w2": mod.feed_forward.w2.weight, "head": model.head_weight}[kind]


def weights_of(step, kind: str):
    """The weight a step multiplies by in product `kind`: packed (QuantisedDecodeStep) or the model's."""
    lw = getattr(step, "layer_weights", None)
    if lw is None:
        return model_weight(step.model, kind)
    return step.head if kind == "head" else getattr(lw[0], kind)


def _nbytes(w) -> int:
    return w.nbytes if isinstance(w, W.QuantWeight) else w.numel() * w.element_size()


def expected(b: _Bench, kind: str, deq: torch.Tensor) -> torch.Tensor:
    """What the call of `kind` must give, from the model's own modules in float32 on the dequantised
    weights (taken before the call: wo and w2 update x in place)."""
    lay, f = b.layer, lambda t: t.float()
    if kind == "wqkv":
        cfg = b.model.config
        q = F.linear(f(lay.attention_norm(b.x)), deq)[:, :cfg.n_heads * cfg.head_dim].view(1, cfg.n_heads, -1)
        angle = b.pos.float()[:, None] * b.model.inv_freq
        return llama.apply_rope(q, angle.cos()[:, None, :], angle.sin()[:, None, :])
    if kind in ("wo", "w2"):
        return f(b.x) + F.linear(f(b.o if kind == "wo" else b.h), deq)
    if kind == "w13":
        gate, up = F.linear(f(lay.ffn_norm(b.x)), deq).chunk(2, dim=-1)
        return F.silu(gate) * up
    return F.linear(f(b.model.norm(b.x)), deq)


def products(step, fmt: str, copy_gbs: float, device: str, repeat: int, pdl: bool) -> list[dict]:
    """Each product of layer 0 and the head at M = 1, called as the step calls it: checked, then
    timed on rotated copies; bytes read over time as GB/s and as a fraction of the copy bandwidth."""
    b, rows = _Bench(step, pdl), []
    cfg = step.model.config
    for kind in KINDS:
        w = weights_of(step, kind)
        row = {"model": cfg.name, "format": fmt, "product": kind, "n": w.shape[0], "k": w.shape[1], "m": 1,
               "n_layers": cfg.n_layers}
        try:
            quantised = isinstance(w, W.QuantWeight)
            want = expected(b, kind, W.dequantise(w) if quantised else w.float())
            row["rel_error_vs_dequantised"] = err = _rel(b.call(kind, w, quantised)(), want)
            del want
            if err > CHECK_TOLERANCE:
                raise AssertionError(f"{fmt} {kind}: relative error {err:.3g} > {CHECK_TOLERANCE} against the "
                                     f"fp32 matmul of its dequantised weights")
            nbytes = _nbytes(w)
            copies = copies_for(nbytes) if device == "cuda" else 1      # no L2 to defeat in the interpreter
            calls = [b.call(kind, c, quantised) for c in [w] + [_clone(w) for _ in range(copies - 1)]]
            t = time_back_to_back(calls, device, repeat)
            rows.append({**row, "weight_bytes": nbytes, "median_s": t, "gbs": nbytes / t / 1e9,
                         "fraction_of_copy": nbytes / t / 1e9 / copy_gbs})
            del calls
        except Exception as err:  # noqa: BLE001 - one failed product is recorded, the rest still run
            rows.append({**row, "error": f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"})
    return rows


def time_back_to_back(calls: list[Callable[[], object]], device: str, repeat: int) -> float:
    """Seconds per call of `calls` run in turn: on a GPU one CUDA graph of them all (repeated to at
    least 8 calls), replayed; elsewhere the calls themselves."""
    if device != "cuda":
        return bench.timeit(lambda: [c() for c in calls], warmup=1, repeat=repeat, device=device).median_s / len(calls)
    seq = calls * max(1, -(-8 // len(calls)))
    graph = cg.capture(lambda: [c() for c in seq])
    return bench.timeit(graph.replay, warmup=3, repeat=repeat, device=device).median_s / len(seq)


# ----------------------------------------------------------------------------- torch's peers

def peer_case(fmt: str, w: torch.Tensor, device: str, group_size: int):
    """(fn(x), kernel name, the dequantised fp32 weights it multiplies by) for torch's own path, or
    (None, reason, None) where it cannot run here."""
    if fmt == "bf16":
        return (lambda x: F.linear(x, w)), "aten.linear (bf16)", w.float()
    if fmt == "int8":
        q, s = woq.quantize_int8(w)
        kernel = "aten._weight_int8pack_mm" if torch.device(device).type == "cpu" else woq.UNFUSED_INT8
        return (lambda x: woq.int8_weight_only_mm(x, q, s)[0]), kernel, woq.dequantize_int8(q, s)
    kernel, why = int4_path(device)
    if why is not None:
        return None, why, None
    q, sz = woq.quantize_int4(w, group_size)
    packed = woq.pack_int4(q, device)
    return (lambda x: woq.int4_weight_only_mm(x, packed, sz, group_size)[0]), kernel, \
        woq.dequantize_int4(q, sz.to(w.dtype), group_size)


def peers(model, ms: list[int], device: str, repeat: int, group_size: int) -> list[dict]:
    """The step's product shapes (layer 0 and the head) through torch's peers at each M."""
    weights = {f"{model.config.name} {kind}": model_weight(model, kind) for kind in KINDS}
    return peers_for(weights, ms, device, repeat, group_size)


def peers_for(weights: dict[str, torch.Tensor], ms: list[int], device: str, repeat: int, group_size: int) -> list[dict]:
    """Each weight (by shape name, "<model> <product>") through torch's peers (bf16 linear, int8
    dequantise-then-matmul, int4 tinygemm) at each M: checked at the smallest M against the
    dequantised weights, then timed."""
    rows, g = [], torch.Generator(device="cpu").manual_seed(4)
    for shape, weight in weights.items():
        w = weight.to(torch.bfloat16)                 # the peers take bf16 activations
        model, kind = shape.rsplit(" ", 1)
        for fmt in ("bf16", "int8", "int4"):
            base = {"model": model, "product": kind, "shape": shape, "format": fmt, "n": w.shape[0], "k": w.shape[1]}
            try:
                fn, kernel, deq = peer_case(fmt, w, device, group_size)
                if fn is None:
                    rows += [{**base, "m": m, "skipped": kernel} for m in ms]
                    continue
                x0 = torch.randn(ms[0], w.shape[1], generator=g).to(device=device, dtype=w.dtype)
                err = _rel(fn(x0), x0.float() @ deq.T)
                del deq
                if err > CHECK_TOLERANCE:
                    raise AssertionError(f"{kernel}: relative error {err:.3g} against its dequantised weights")
                # copies of the weights past the L2 cache, each prepared as the peer takes it
                copies = copies_for(w.numel() * w.element_size()) if device == "cuda" else 1
                fns = [fn] + [peer_case(fmt, w.clone(), device, group_size)[0] for _ in range(copies - 1)]
                for m in ms:
                    x = torch.randn(m, w.shape[1], generator=g).to(device=device, dtype=w.dtype)
                    t = bench.timeit(lambda f: f(x), warmup=3, repeat=repeat, inputs=[(f,) for f in fns],
                                     device=device)
                    rows.append({**base, "m": m, "kernel": kernel, "rel_error_vs_dequantised": err,
                                 "median_s": t.median_s, "spread": t.spread, "copies": copies})
                del fns
            except Exception as err:  # noqa: BLE001 - recorded, the rest still run
                rows += [{**base, "m": m, "error": f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"}
                         for m in ms]
    return rows


# ----------------------------------------------------------------------------- the runners

def runner_row(model, fmt: str, spec: dict, device: str, copy_gbs: float, group_size: int) -> tuple[dict, object]:
    """A batch-1 DecodeGraphRunner on the Triton step (bf16, or int8 / int4 weights): tokens/s,
    bytes read per token, and their rate as a fraction of the copy bandwidth. Returns (row, runner)."""
    weights = None if fmt == "bf16" else fmt
    runner = cg.DecodeGraphRunner(model, 1, spec["max_seq"], sizes=[1], kernels="triton", weights=weights,
                                  group_size=group_size, verbose=False)
    cfg = model.config
    runner.generate(prompts_for(cfg, 1, spec["prompt_len"]), 2)      # fills the cache row the steps read
    t = time_steps(runner.step, cfg, 1, spec["prompt_len"], device, spec["repeat"])
    context = keys_attended(spec["prompt_len"])
    nbytes = (bf16_bytes_per_token(model, context) if weights is None else runner.decode.bytes_per_token(context))
    gbs = nbytes / t.median_s / 1e9
    dtype = {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(model.tok_embeddings.weight.dtype, "fp32")
    return ({"model": cfg.name, "format": fmt, "batch": 1, "dtype": dtype, "n_layers": cfg.n_layers,
             "tokens_per_s": 1 / t.median_s,
             "ms_per_token": t.median_s * 1e3, "spread": t.spread, "bytes_per_token": nbytes, "gbs": gbs,
             "fraction_of_copy": gbs / copy_gbs, "pdl": runner.decode.pdl, "graphs": runner.use_graphs}, runner)
