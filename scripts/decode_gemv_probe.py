"""Probe for issue 25: can batch-1 decode's matrix-vector products stream weights at the copy rate?

The reference H200 record (h200/cuda_graphs.json, llama-1b, batch 1) spends 906 us of a 1,230 us
step in 113 matmul kernels: the layer weights are read at well under the copy rate, the lm_head
(one 525 MB read) at about the copy rate. This probe times one thing only, the chain of
matrix-vector products of the decode layers, inside a CUDA graph, three ways:

1. cuBLAS: `F.linear` on a [1, K] activation, what the course model runs today;
2. a Triton GEMV: each program multiplies a [BLOCK_N, BLOCK_K] tile of W (16-byte loads along K)
   by a K slice of x and writes its partial sums; the *next* GEMV adds the previous one's
   partials as it loads x, so split-K needs no atomics and no extra reduction kernel;
3. the same with programmatic dependent launch (PDL): a kernel loads its weight tile, which does
   not depend on the previous kernel, *before* `gdc_wait`, so weight reads overlap the previous
   kernel's tail instead of waiting for it.

Every chain's output is checked against a float32 chain first. Not a model (no norms, RoPE,
attention or activations): it measures what the weights' reads can reach. Run on a GPU:

    python scripts/decode_gemv_probe.py out.json [--preset llama-1b]

On a CPU (Triton's interpreter, tiny shapes, no timing): python scripts/decode_gemv_probe.py --check
"""
from __future__ import annotations

import argparse
import json
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from course_kit import bench, cuda_graphs, roofline  # noqa: E402

HAS_PDL = hasattr(tl.extra.cuda, "gdc_wait")
PRESETS = {   # (dim, n_heads * head_dim + 2 * n_kv_heads * head_dim, ffn_dim, layers)
    "llama-1b": (2048, 2048 + 2 * 512, 8192, 16),
    "smollm-135m": (576, 576 + 2 * 192, 1536, 30),
    "tiny": (64, 96, 128, 2),
}


@triton.jit
def _gemv_partials(W, X_PARTS, OUT_PARTS, N, K, stride_w, x_splits, x_stride,
                   BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PDL: tl.constexpr):
    """OUT_PARTS[pid_k, n] = sum over this program's K slice of W[n, k] * x[k], where
    x[k] = sum_s X_PARTS[s, k] (the previous GEMV's partial sums, x_splits of them)."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    rows = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    # the weights do not depend on the previous kernel: with PDL they are read before the wait
    w = tl.load(W + rows[:, None] * stride_w + cols[None, :], mask=(rows[:, None] < N) & (cols[None, :] < K),
                other=0.0)
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()    # the next kernel may start its own weight reads
        tl.extra.cuda.gdc_wait()                 # the previous kernel's partial sums are now visible
    x = tl.zeros([BLOCK_K], dtype=tl.float32)
    for s in range(0, x_splits):
        x += tl.load(X_PARTS + s * x_stride + cols, mask=cols < K, other=0.0)
    part = tl.sum(w.to(tl.float32) * x[None, :], axis=1)
    tl.store(OUT_PARTS + pid_k * N + rows, part, mask=rows < N)


def chain_shapes(preset: str) -> list[tuple[int, int]]:
    """(N, K) of every matrix-vector product, in order, for all layers: wqkv, wo, w13, w2."""
    dim, qkv, ffn, layers = PRESETS[preset]
    return [(qkv, dim), (dim, dim), (2 * ffn, dim), (dim, ffn)] * layers


def make_weights(shapes, device, seed=0):
    g = torch.Generator(device=device).manual_seed(seed)
    return [(torch.randn(n, k, generator=g, device=device) / k ** 0.5).to(torch.bfloat16) for n, k in shapes]


def chain_reference(weights, x):
    """The chain in float32: each product's input is the first K entries of the previous output."""
    h = x.float()
    for w in weights:
        h = w.float() @ h[: w.shape[1]]
    return h


def chain_cublas(weights, x):
    h = x.view(1, -1)
    for w in weights:
        h = torch.nn.functional.linear(h[:, : w.shape[1]], w)
    return h.view(-1)


class TritonChain:
    """The Triton chain with preallocated partial-sum buffers (so it can be captured)."""

    def __init__(self, weights, block_n: int, block_k: int, pdl: bool, num_warps: int = 4):
        self.weights, self.block_n, self.block_k = weights, block_n, block_k
        self.pdl, self.num_warps = pdl and HAS_PDL, num_warps
        dev = weights[0].device
        self.parts = [torch.zeros(triton.cdiv(w.shape[1], block_k), w.shape[0], device=dev) for w in weights]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        prev, splits, stride = x.float().contiguous(), 1, 0
        for w, out in zip(self.weights, self.parts):
            n, k = w.shape
            grid = (triton.cdiv(n, self.block_n), triton.cdiv(k, self.block_k))
            extra = {"launch_pdl": True} if self.pdl else {}
            _gemv_partials[grid](w, prev, out, n, k, w.stride(0), splits, stride, BLOCK_N=self.block_n,
                                 BLOCK_K=self.block_k, PDL=self.pdl, num_warps=self.num_warps, **extra)
            prev, splits, stride = out, out.shape[0], out.shape[1]
        return prev.sum(0)


def graph_seconds(fn, x, replays: int = 20) -> float:
    """Median seconds of one replay of `fn(x)` captured in a CUDA graph (the course's capture)."""
    graph = cuda_graphs.capture(lambda: fn(x))
    return bench.timeit(graph.replay, warmup=2, repeat=replays, device="cuda").median_s


def check(preset: str, device) -> dict:
    """Every chain against the float32 chain (relative max error)."""
    weights = make_weights(chain_shapes(preset), device)
    x = torch.randn(weights[0].shape[1], device=device).to(torch.bfloat16)
    ref = chain_reference(weights, x)
    out = {"cublas": chain_cublas(weights, x).float()}
    for bn, bk, pdl in ((16, 64, False), (8, 32, True)):
        out[f"triton bn={bn} bk={bk} pdl={pdl}"] = TritonChain(weights, bn, bk, pdl and device.type == "cuda")(x)
    scale = ref.abs().max().item()
    return {name: (y.float().cpu() - ref.cpu()).abs().max().item() / scale for name, y in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?", default="decode_gemv_probe.json")
    ap.add_argument("--preset", default="llama-1b", choices=sorted(PRESETS))
    ap.add_argument("--check", action="store_true", help="correctness only, tiny shapes (CPU interpreter)")
    args = ap.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.check or device.type == "cpu":
        errs = check("tiny", device)
        print(json.dumps(errs, indent=1))
        assert all(e < 2e-2 for e in errs.values()), errs
        return
    result = {"preset": args.preset, "gpu": torch.cuda.get_device_name(), "triton": triton.__version__,
              "torch": torch.__version__, "has_pdl": HAS_PDL, "check": check("tiny", device)}
    shapes = chain_shapes(args.preset)
    weights = make_weights(shapes, device)
    weight_bytes = sum(w.numel() * w.element_size() for w in weights)
    x = torch.randn(shapes[0][1], device=device).to(torch.bfloat16)
    ref = chain_reference(weights, x)
    result.update(copy_gbs=roofline.copy_bandwidth(1 << 30, device="cuda")["gbs"], weight_bytes=weight_bytes, rows=[])
    variants = {"cublas F.linear": lambda: chain_cublas}
    for bn, bk, warps in ((8, 256, 4), (16, 256, 4), (16, 512, 4), (32, 256, 8), (8, 512, 4), (32, 128, 4)):
        for pdl in (False, True):
            if pdl and not HAS_PDL:
                continue
            variants[f"triton bn={bn} bk={bk} w={warps} pdl={pdl}"] = (
                lambda bn=bn, bk=bk, warps=warps, pdl=pdl: TritonChain(weights, bn, bk, pdl, warps))
    for name, make in variants.items():
        row = {"variant": name}
        try:
            fn = make()
            err = ((fn(x).float() - ref).abs().max() / ref.abs().max()).item()
            row["rel_err"] = err
            s = graph_seconds(fn, x)
            row.update(us=s * 1e6, gbs=weight_bytes / s / 1e9, of_copy=weight_bytes / s / 1e9 / result["copy_gbs"])
        except Exception as exc:  # noqa: BLE001 - a variant that fails is a result too
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
        result["rows"].append(row)
        print(json.dumps(row), flush=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
