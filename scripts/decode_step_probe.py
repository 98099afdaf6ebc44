"""Tuning runs for issue 25: the Triton decode step (course_kit/cuda_graphs/decode_kernels) on a GPU.

Three parts, one JSON file (written after each part, so a cut-off run keeps what it measured):
1. "gemv": each of the layer's products (wqkv+norm, wo+residual, w13+norm, w2+swiglu+residual,
   lm_head+norm) as 16 calls on 16 distinct weights inside one CUDA graph (so no call finds its
   weights in L2), over block shapes (programs per SM, weights per tile) and warps, and `gemv_blocks`' pick,
   against cuBLAS F.linear on the same chain; GB/s of weights read.
2. "step": llama-1b and smollm-135m (--presets) at batch 1 in the graph runner: the Triton step
   over launch and block settings (module constants of decode_kernels.gemv, set per variant) and
   attention's context slices; --baselines adds the model's own step and the Inductor-fused one.
   Tokens against the eager step, ms per token (at 66 keys, and at 482 of the cache's 512), GB/s
   and a kernel profile. The variant list is a baseline to start from; each round's is in its log
   (decode-probe-1-s8.json: double-buffered tiles and L2 prefetch were slower, RoPE in the q/k/v
   product's store faster; -3-s8: a Triton embedding kernel that joins the PDL chain made no
   difference beyond the run's spread, so F.embedding stays; -4-s8: SwiGLU in w13's store against
   w2's load, three times each, alternating, before the step kept only the first). A knob is a
   module constant of decode_kernels.gemv or .step; candidate kernels wait in scripts/ until such a
   run measures them.
3. "fp32": the Triton step's greedy tokens against HF transformers in float32 (smollm-135m shape).

    python scripts/decode_step_probe.py OUT.json [--parts gemv,step,fp32] [--tiles 4096,8192]
"""
from __future__ import annotations

import argparse
import functools
import json
import time

import torch
import torch.nn.functional as F

from course_kit import bench
from course_kit.cuda_graphs import runner as cuda_graphs
from course_kit.roofline import ceilings as roofline
from course_kit.benchmarks.cuda_graphs import (SIZES, agreement, keys_attended, kernel_profile, prompts_for,
                                               time_steps, triton_fp32_vs_hf)
from course_kit.benchmarks.model import weight_bytes
from course_kit.attention.paged_triton import paged_decode_triton
from course_kit.cuda_graphs.decode_kernels import constants, gemv as G
from course_kit.cuda_graphs.decode_kernels import step as S
from course_kit.models import llama

CALLS = 16


def product_shapes(cfg) -> dict[str, tuple[int, int, str, bool]]:
    """name -> (N, K, prologue, residual) of the layer's products and the logits."""
    qkv = (cfg.n_heads + 2 * cfg.n_kv_heads) * cfg.head_dim
    return {"wqkv+norm": (qkv, cfg.dim, "norm", False), "wo+residual": (cfg.dim, cfg.n_heads * cfg.head_dim, "plain", True),
            "w13+norm": (2 * cfg.ffn_dim, cfg.dim, "norm", False),
            "w2+swiglu+residual": (cfg.dim, cfg.ffn_dim, "swiglu", True),
            "lm_head+norm": (cfg.vocab_size, cfg.dim, "norm", False)}


def graph_us(fn, repeat: int = 30) -> float:
    graph = cuda_graphs.capture(fn)
    return bench.timeit(graph.replay, warmup=3, repeat=repeat, device="cuda").median_s * 1e6


def sweep_gemv(cfg, tiles, per_sm, warps) -> list[dict]:
    rows = []
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for name, (n, k, prologue, residual) in product_shapes(cfg).items():
        calls = 4 if name.startswith("lm_head") else CALLS
        ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02 for _ in range(calls)]
        x = torch.randn(1, 2 * k if prologue == "swiglu" else k, device="cuda", dtype=torch.bfloat16)
        nw = torch.ones(k, device="cuda", dtype=torch.bfloat16)
        res = torch.zeros(1, n, device="cuda", dtype=torch.bfloat16)
        nbytes = sum(w.numel() * 2 for w in ws)
        xin = x[:, :k] if prologue == "swiglu" else x
        t = graph_us(lambda: [F.linear(xin, w) for w in ws])
        rows.append({"product": name, "variant": "cublas", "us_per_call": t / calls, "gbs": nbytes / t / 1e3})
        print(json.dumps(rows[-1]), flush=True)
        def tuned():
            for w in ws:
                G.gemv(w, x, prologue=prologue, norm_weight=nw, residual=res if residual else None)
        t = graph_us(tuned)
        rows.append({"product": name, "variant": "triton gemv_blocks", "us_per_call": t / calls,
                     "gbs": nbytes / t / 1e3, "blocks": G.gemv_blocks(n, k, sms)})
        print(json.dumps(rows[-1]), flush=True)
        seen = set()
        for pps in per_sm:
            for tile in tiles:
                blocks = G.gemv_blocks(n, k, sms, programs_per_sm=pps, tile=tile)
                for nw_ in warps:
                    if (blocks, nw_) in seen:
                        continue
                    seen.add((blocks, nw_))
                    row = {"product": name, "variant": "triton", "blocks": blocks, "warps": nw_,
                           "programs_per_sm": pps, "tile": tile}
                    try:
                        def chain(blocks=blocks, nw_=nw_):
                            for w in ws:
                                G.gemv(w, x, prologue=prologue, norm_weight=nw, residual=res if residual else None,
                                       blocks=blocks, num_warps=nw_)
                        t = graph_us(chain)
                        row.update(us_per_call=t / calls, gbs=nbytes / t / 1e3)
                    except Exception as exc:  # noqa: BLE001 - a failing shape is a result
                        row["error"] = f"{type(exc).__name__}: {exc}"[:200]
                    rows.append(row)
                    print(json.dumps(row), flush=True)
        del ws
    return rows


def step_rows(preset: str, copy_gbs: float, variants) -> list[dict]:
    model = llama.Transformer.from_preset(preset, seed=0, dtype=torch.bfloat16, device="cuda")
    cfg, rows = model.config, []
    prompts = prompts_for(cfg, 1, 64)
    check = prompts_for(cfg, 1, 32, seed=1)
    want = cuda_graphs.DecodeGraphRunner(model, 1, 512, sizes=[1], use_graphs=False, verbose=False).generate(check, 32)
    read = weight_bytes(model) + cfg.kv_bytes_per_token(torch.bfloat16) * keys_attended(64)
    for name, kw, pdl in variants:
        try:
            rows.append(step_row(model, prompts, check, want, read, copy_gbs, preset, name, kw, pdl))
        except Exception as exc:  # noqa: BLE001 - a variant that fails is a result, the rest still run
            rows.append({"preset": preset, "variant": name, "error": f"{type(exc).__name__}: {exc}"[:400]})
        print(json.dumps({k: v for k, v in rows[-1].items() if k != "top"}), flush=True)
        if kw.get("fuse"):
            cuda_graphs.fuse_layers(model, enable=False)
    return rows


def step_row(model, prompts, check, want, read, copy_gbs, preset, name, kw, pdl) -> dict:
    cfg = model.config
    t0 = time.perf_counter()
    knobs = dict(kw.pop("knobs", {}))
    splits = knobs.pop("splits", None)
    if splits is not None:   # attention's context slices (default: decode_splits' rule)
        S.paged_decode_triton = functools.partial(paged_decode_triton, splits=splits)
    try:
        with constants(knobs, G, S):      # a knob is a module constant of gemv or step
            runner = cuda_graphs.DecodeGraphRunner(model, 1, 512, sizes=[1], verbose=False, **kw)
            if pdl is not None:
                runner.decode.pdl = pdl
                runner.capture_all()
    finally:
        S.paged_decode_triton = paged_decode_triton
    build_s = time.perf_counter() - t0
    got = runner.generate(check, 32)
    runner.generate(prompts, 2)
    t = time_steps(runner.step, cfg, 1, 64, "cuda", 200)
    t_long = time_steps(runner.step, cfg, 1, 480, "cuda", 200)   # near the cache's end: 482 keys
    prof = kernel_profile(lambda: runner.step(torch.ones(1, dtype=torch.long, device="cuda"),
                                              torch.full((1,), 9, device="cuda")))
    return {"preset": preset, "variant": name, "ms_per_token": t.median_s * 1e3,
            "tokens_per_s": 1 / t.median_s, "ms_per_token_at_482_keys": t_long.median_s * 1e3,
            "gbs": read / t.median_s / 1e9,
            "of_copy": read / t.median_s / 1e9 / copy_gbs, "build_s": build_s,
            "agreement_with_eager": agreement(got, want),
            "kernels_per_step": prof.get("kernels_per_step"), "gpu_us_per_step": prof.get("gpu_us_per_step"),
            "top": prof.get("top")}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--parts", default="step,fp32,gemv")
    ap.add_argument("--tiles", default="4096,8192,16384")
    ap.add_argument("--per-sm", default="1,2,4")
    ap.add_argument("--warps", default="4,8")
    ap.add_argument("--presets", default="llama-1b,smollm-135m")
    ap.add_argument("--baselines", action="store_true", help="also the model's own step and the Inductor-fused one")
    args = ap.parse_args()
    parts = args.parts.split(",")
    result = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
              "triton": __import__("triton").__version__, "has_pdl": G.HAS_PDL}
    result["copy_gbs"] = roofline.copy_bandwidth(1 << 30, device="cuda")["gbs"]
    save = lambda: json.dump(result, open(args.out, "w"), indent=1)  # noqa: E731
    if "step" in parts:
        tri = lambda **knobs: {"kernels": "triton", "knobs": knobs}  # noqa: E731
        variants = [("triton_graph_pdl", tri(), True), ("pdl 2/SM", tri(PROGRAMS_PER_SM=2), True),
                    ("attention in 4 slices", tri(splits=4), True), ("triton_graph_pdl again", tri(), True)]
        if args.baselines:
            variants = [("graph", {}, None), ("fused_graph", {"fuse": True}, None)] + variants
        result["step"] = []
        for preset in args.presets.split(","):
            result["step"] += step_rows(preset, result["copy_gbs"], [(n, dict(kw), p) for n, kw, p in variants])
            save()
    if "fp32" in parts:
        result["fp32_vs_hf"] = triton_fp32_vs_hf("smollm-135m", "cuda", SIZES["full"])   # the bench's check
        print(json.dumps({"fp32_identical": result["fp32_vs_hf"]["identical"]}), flush=True)
        save()
    if "gemv" in parts:
        ints = lambda s: [int(v) for v in s.split(",")]  # noqa: E731
        result["gemv"] = sweep_gemv(llama.ModelConfig.from_preset("llama-1b"), ints(args.tiles),
                                    ints(args.per_sm), ints(args.warps))
        save()


if __name__ == "__main__":
    main()
