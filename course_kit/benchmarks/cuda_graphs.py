"""`course-kit bench cuda_graphs`: launch overhead, the decode graph runner, reduce-overhead, HBM.

In one run, on the same weights:
1. N tiny kernels eager against one graph replay (µs per launch);
2. the copy bandwidth (the bandwidth roofline of this run);
3. smollm-135m decode per batch size: eager step, graph runner, fused graph runner (Inductor
   blocks + graphs), `torch.compile(mode="reduce-overhead")`, and HF `generate` at batch 1;
   graph replay is checked token for token against the eager step first;
4. llama-1b batch-1 decode, the step in four forms, each one change from the last: the model's
   own step in a graph, Inductor-fused blocks, the course's Triton kernels (decode_kernels), and
   those with programmatic dependent launch; bytes of weights + KV read per token over time per
   token, as a fraction of the copy bandwidth;
5. the Triton step's greedy tokens against HF transformers in float32, and its agreement with the
   eager step in the bench's dtype;
6. the pitfalls, each in its own process; and kernel profiles that explain the figures.
Targets: launch ratio >= 5; runner >= 20x HF generate tokens/s; reduce-overhead within 15% of
the runner; llama-1b at >= 60% of the copy bandwidth and <= 0.80 ms per token; smollm-135m at
>= 2,000 tokens/s at batch 1.
"""
from __future__ import annotations

import time

import torch

from .. import bench
from ..cuda_graphs import pitfalls, runner as cg
from .. import device as device_info
from ..compile_modes.kernels import KERNELS_COMPLETE, is_annotation
from ..cuda_graphs.explain import explain_hbm, explain_kernels, explain_reduce_overhead, is_gemm
from ..models import llama
from .batching import hf_generate_greedy
from .model import build, free, hf_generate_tokens_per_s, weight_bytes
from ..device import default_device
from ..models.hf import model_to_hf

SIZES = {
    "smoke": dict(preset="tiny", big=None, batches=[1, 2], max_seq=64, prompt_len=8, repeat=5,
                  hf_tokens=8, n_kernels=100, copy_mib=16, check_tokens=8),
    "cpu": dict(preset="tiny", big=None, batches=[1, 2, 4], max_seq=128, prompt_len=16, repeat=10,
                hf_tokens=16, n_kernels=300, copy_mib=128, check_tokens=16),
    "small_gpu": dict(preset="smollm-135m", big="llama-1b", batches=[1, 2, 4, 8], max_seq=512,
                      prompt_len=64, repeat=100, hf_tokens=64, n_kernels=1000, copy_mib=1024, check_tokens=32),
    "full": dict(preset="smollm-135m", big="llama-1b", batches=[1, 2, 4, 8], max_seq=512,
                 prompt_len=64, repeat=100, hf_tokens=64, n_kernels=1000, copy_mib=2048, check_tokens=32),
}
TARGETS = {"launch_ratio": 5.0, "runner_vs_hf_generate": 20.0, "reduce_overhead_within": 0.15,
           "hbm_fraction": 0.60, "big_ms_per_token": 0.80, "runner_tokens_per_s_b1": 2000.0}


def copy_bandwidth(mib: int, repeat: int, device: str) -> dict:
    """Device-to-device copy: bytes read + bytes written over the time (as notebook 00)."""
    n = mib * 2**20 // 4
    src = torch.ones(n, device=device)
    dst = torch.empty_like(src)
    t = bench.timeit(lambda: dst.copy_(src), warmup=3, repeat=repeat, device=device)
    return {"name": "copy", "bytes": 2 * n * 4, "gbs": 2 * n * 4 / t.median_s / 1e9, "timing": t.as_dict()}


def prompts_for(cfg, batch: int, length: int, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, cfg.vocab_size, (batch, length), generator=g).tolist()


def keys_attended(prompt_len: int) -> int:
    """K/V positions each row reads in a step `time_steps` times: it decodes at position
    prompt_len + 1, so the keys 0 .. prompt_len + 1 (not the whole cache it was given)."""
    return prompt_len + 2


def time_steps(step, cfg, batch: int, prompt_len: int, device, repeat: int) -> bench.Timing:
    """Median time of one decode step at `batch` (tokens at position prompt_len + 1)."""
    tokens = torch.randint(1, cfg.vocab_size, (batch,), device=device)
    positions = torch.full((batch,), prompt_len + 1, device=device)
    return bench.timeit(lambda: step(tokens, positions), warmup=3, repeat=repeat, device=device)


def kernel_profile(fn, steps: int = 3) -> dict:
    """Kernels per step and the five costliest, from the profiler (explains launch-bound steps)."""
    try:
        return _kernel_profile(fn, steps)
    except Exception as err:  # noqa: BLE001 - a profile explains figures; it must not stop the run
        return {"error": repr(err)}


def _kernel_profile(fn, steps: int) -> dict:
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            fn()
        torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        if is_annotation(e):  # a range spanning kernels, not a kernel: its time would count twice
            continue
        us = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
        rows.append((e.key, e.count, us))
    kernels = [r for r in rows if r[2] > 0]
    kernels.sort(key=lambda r: -r[2])
    gemm = [r for r in kernels if is_gemm(r[0])]
    return {"kernels_complete": KERNELS_COMPLETE, "kernels_per_step": sum(r[1] for r in kernels) / steps,
            "gpu_us_per_step": sum(r[2] for r in kernels) / steps,
            # matrix multiplies (cuBLAS names) vs the rest, over all kernels: see decode_explain
            "gemm_kernels_per_step": sum(r[1] for r in gemm) / steps,
            "gemm_us_per_step": sum(r[2] for r in gemm) / steps,
            "top": [{"kernel": k[:80], "calls_per_step": c / steps, "us_per_step": us / steps}
                    for k, c, us in kernels[:10]]}


def _runner_rows(name, runner, cfg, spec, device, results, preset):
    for b in spec["batches"]:
        runner.generate(prompts_for(cfg, b, spec["prompt_len"]), 2)  # prefill rows 0..b-1
        t = time_steps(runner.step, cfg, b, spec["prompt_len"], device, spec["repeat"])
        results.append(bench.Case(f"{preset}/{name}/b{b}", t, {
            "preset": preset, "variant": name, "batch": b, "tokens_per_s": b / t.median_s,
            "ms_per_step": t.median_s * 1e3}).as_dict())
    return {r["batch"]: r for r in results if r.get("variant") == name and r.get("preset") == preset}


@bench.topic("cuda_graphs", help="launch overhead, decode graph runner vs eager/compile/HF, HBM fraction")
def run(params: dict) -> dict:
    size = params.get("size", "cpu")
    spec = {**SIZES[size], **{k: v for k, v in params.items() if k in SIZES["full"]}}
    device = params.get("device") or default_device()
    gpu = device == "cuda"
    dtype = device_info.param_dtype(params)  # fp16 on a T4
    results: list[dict] = []
    summary: dict = {"dtype": str(dtype).replace("torch.", "")}

    launch = cg.launch_overhead(spec["n_kernels"], repeat=20, device=device)
    results.append({"name": "launch", **{k: v for k, v in launch.items() if k not in ("eager", "graph")}})
    summary["launch_ratio"] = launch["ratio"]
    copy = copy_bandwidth(spec["copy_mib"], 20, device)
    results.append(copy)
    summary["copy_gbs"] = copy["gbs"]

    preset, maxb = spec["preset"], max(spec["batches"])
    model, hf = build(preset, dtype, device)
    cfg = model.config
    hf_prompt = torch.tensor(prompts_for(cfg, 1, spec["prompt_len"]), device=device)
    hf_gen = hf_generate_tokens_per_s(hf, hf_prompt, spec["hf_tokens"])
    results.append({"name": f"{preset}/hf_generate/b1", "preset": preset, "variant": "hf_generate",
                    "batch": 1, "tokens_per_s": hf_gen["tokens_per_s"], "ms_per_step": hf_gen["s_per_token"] * 1e3})
    del hf
    free()
    summary["decode_bytes"] = {"preset": preset, "weights": weight_bytes(model),
                               "kv_per_row": cfg.kv_bytes_per_token(dtype) * keys_attended(spec["prompt_len"])}

    # correctness first: graph replay against the same padded step run eagerly
    check_prompts = prompts_for(cfg, min(3, maxb), spec["prompt_len"] // 2, seed=1)
    mk = lambda **kw: cg.DecodeGraphRunner(model, maxb, spec["max_seq"], verbose=False, **kw)  # noqa: E731
    eager = mk(use_graphs=False)
    want = eager.generate(check_prompts, spec["check_tokens"])
    if gpu:
        graph = mk()
        got = graph.generate(check_prompts, spec["check_tokens"])
        summary["graph_matches_eager"] = got == want
        if got != want:
            raise AssertionError(f"graph replay tokens differ from eager decode: {got} vs {want}")
    eager_rows = _runner_rows("eager", eager, cfg, spec, device, results, preset)
    if not gpu:
        summary["note"] = "no CUDA GPU: eager decode only (graphs, compile and HF ratios need a GPU)"
        return {"params": {**spec, "dtype": dtype}, "results": results, "summary": summary}

    graph_rows = _runner_rows("graph", graph, cfg, spec, device, results, preset)
    summary["profile_eager_b1"] = kernel_profile(lambda: eager.step(*_one(cfg, device)))
    del eager, graph
    t0 = time.perf_counter()
    fused = mk(fuse=True)
    summary["fuse_compile_s"] = time.perf_counter() - t0
    fused.generate(check_prompts, 4)
    agree = fused.generate(check_prompts, spec["check_tokens"])
    summary["fused_token_agreement"] = agreement(agree, want)
    fused_rows = _runner_rows("fused_graph", fused, cfg, spec, device, results, preset)
    summary["profile_fused_graph_b1"] = kernel_profile(lambda: fused.step(*_one(cfg, device)))
    del fused
    cg.fuse_layers(model, enable=False)
    triton = mk(kernels="triton")
    summary["triton_pdl"] = triton.decode.pdl
    summary["triton_token_agreement"] = agreement(triton.generate(check_prompts, spec["check_tokens"]), want)
    triton_rows = _runner_rows("triton_graph", triton, cfg, spec, device, results, preset)
    summary["profile_triton_graph_b1"] = kernel_profile(lambda: triton.step(*_one(cfg, device)))
    del triton
    summary["triton_fp32_vs_hf"] = triton_fp32_vs_hf(preset, device, spec)

    from torch._dynamo.utils import counters
    skips_before = counters["inductor"].get("cudagraph_skips", 0)
    ro_rows, summary["profile_reduce_overhead_b1"] = _reduce_overhead(model, spec, device, results, preset)
    # a skip means reduce-overhead ran without graphs (a mutated non-static input, a CPU op...)
    summary["reduce_overhead_cudagraph_skips"] = counters["inductor"].get("cudagraph_skips", 0) - skips_before
    summary.update(_batch1_ratios(eager_rows[1], graph_rows[1], fused_rows[1], triton_rows[1], ro_rows[1],
                                  hf_gen["tokens_per_s"]))
    del model
    free()

    if spec.get("big"):
        summary.update(_bandwidth(spec, dtype, device, copy["gbs"], results))
    summary["pitfalls"] = pitfalls.run_pitfalls()
    summary.update(_meets_and_words(summary, results))
    return {"params": {**spec, "dtype": dtype}, "results": results, "summary": summary}


def _batch1_ratios(eager: dict, graph: dict, fused: dict, triton: dict, reduce_overhead: dict,
                   hf_tokens_per_s: float) -> dict:
    """The batch-1 comparisons of one record: the fastest runner against HF generate, graphs
    against eager launches, and torch.compile's reduce-overhead against each runner."""
    best = min((graph, fused, triton), key=lambda r: r["median_s"])
    ro = reduce_overhead["tokens_per_s"]
    return {
        "runner_variant": best["variant"],
        "runner_tokens_per_s_b1": best["tokens_per_s"],
        "hf_generate_tokens_per_s_b1": hf_tokens_per_s,
        "runner_vs_hf_generate": best["tokens_per_s"] / hf_tokens_per_s,
        "graph_vs_eager_b1": eager["median_s"] / graph["median_s"],
        # a ratio of throughputs at batch 1: below 1, reduce-overhead is the slower one
        "reduce_overhead_vs_runner": ro / best["tokens_per_s"],
        "reduce_overhead_vs_runner_definition": (
            "tokens/s of torch.compile(mode='reduce-overhead') / tokens/s of the faster DecodeGraphRunner "
            "variant (runner_variant), batch 1, same model and cache; < 1: reduce-overhead is slower"),
        "runner_speedup_over_reduce_overhead": best["tokens_per_s"] / ro,
        "reduce_overhead_vs_graph_runner": ro / graph["tokens_per_s"],
        "reduce_overhead_vs_fused_runner": ro / fused["tokens_per_s"],
    }


def _meets_and_words(summary: dict, results: list[dict]) -> dict:
    """The engineering targets, whether this record meets them, and each figure explained from the
    record's own numbers and profiles (notebook 05 shows the words, never the targets)."""
    return {
        "targets": TARGETS,
        "meets": {
            "launch_ratio": summary["launch_ratio"] >= TARGETS["launch_ratio"],
            "runner_vs_hf_generate": summary["runner_vs_hf_generate"] >= TARGETS["runner_vs_hf_generate"],
            "reduce_overhead_within": abs(summary["reduce_overhead_vs_runner"] - 1) <= TARGETS["reduce_overhead_within"],
            "hbm_fraction": summary.get("hbm_fraction", 0) >= TARGETS["hbm_fraction"],
            "big_ms_per_token": summary.get("big_ms_per_token", float("inf")) <= TARGETS["big_ms_per_token"],
            "runner_tokens_per_s_b1": summary["runner_tokens_per_s_b1"] >= TARGETS["runner_tokens_per_s_b1"],
        },
        "explain": {"reduce_overhead_within": explain_reduce_overhead(summary, results),
                    "hbm_fraction": explain_hbm(summary, results),
                    "big_ms_per_token": explain_kernels(summary, results)},
    }


def agreement(got: list[list[int]], want: list[list[int]]) -> float:
    """The fraction of positions where two greedy runs chose the same token."""
    return sum(a == b for x, y in zip(got, want) for a, b in zip(x, y)) / sum(map(len, want))


def triton_fp32_vs_hf(preset: str, device: str, spec: dict) -> dict:
    """The Triton step's greedy tokens in float32 against HF generate on the same weights."""
    model = llama.Transformer.from_preset(preset, seed=0, dtype=torch.float32, device=device)
    hf = model_to_hf(model)
    prompts = prompts_for(model.config, 2, spec["prompt_len"] // 2, seed=2)
    runner = cg.DecodeGraphRunner(model, 2, spec["max_seq"], verbose=False, kernels="triton")
    got = runner.generate(prompts, spec["check_tokens"])
    want = [hf_generate_greedy(hf, p, spec["check_tokens"]) for p in prompts]
    del runner, hf, model
    free()
    return {"identical": got == want, "agreement": agreement(got, want), "prompts": len(prompts),
            "new_tokens": spec["check_tokens"]}


def _one(cfg, device):
    return (torch.ones(1, dtype=torch.long, device=device), torch.full((1,), 9, device=device))


def _reduce_overhead(model, spec, device, results, preset) -> tuple[dict, dict]:
    """Rows per batch size for reduce-overhead, and the profile of its batch-1 step."""
    cfg, maxb = model.config, max(spec["batches"])
    cache = llama.StaticKVCache(cfg, maxb, spec["max_seq"], model.tok_embeddings.weight.dtype, device)
    with torch.no_grad():
        model.prefill(torch.tensor(prompts_for(cfg, maxb, spec["prompt_len"]), device=device), cache)
        step = cg.reduce_overhead_step(model, cache)
        rows, profile = {}, {}
        for b in spec["batches"]:  # 1 compiles static; 2 recompiles with a dynamic batch; 4, 8 reuse it
            toks = torch.ones(b, dtype=torch.long, device=device)
            pos = torch.full((b,), spec["prompt_len"], device=device)
            t0 = time.perf_counter()
            step(toks, pos)
            torch.cuda.synchronize()
            compile_s = time.perf_counter() - t0
            t = time_steps(lambda tk, ps: step(tk, ps).argmax(-1), cfg, b, spec["prompt_len"], device, spec["repeat"])
            row = bench.Case(f"{preset}/reduce_overhead/b{b}", t, {
                "preset": preset, "variant": "reduce_overhead", "batch": b, "tokens_per_s": b / t.median_s,
                "ms_per_step": t.median_s * 1e3, "first_call_s": compile_s}).as_dict()
            results.append(row)
            rows[b] = row
            if b == 1:  # the batch-1 graph, profiled before batch 2 recompiles the step
                profile = kernel_profile(lambda: step(*_one(cfg, device)))
    return rows, profile


# The llama-1b step in four forms, each one change from the one before (notebook 05's ladder).
BIG_FORMS = [("graph", {}), ("fused_graph", {"fuse": True}), ("triton_graph", {"kernels": "triton", "pdl": False}),
             ("triton_graph_pdl", {"kernels": "triton", "pdl": True})]


def _bandwidth(spec, dtype, device, copy_gbs, results) -> dict:
    """llama-1b, batch 1: bytes read per token (weights + the K/V rows attended) over time per token."""
    from ..cuda_graphs.decode_kernels.step import pdl_supported
    big = spec["big"]
    model = llama.Transformer.from_preset(big, seed=0, dtype=dtype, device=device)
    cfg = model.config
    read = weight_bytes(model) + cfg.kv_bytes_per_token(dtype) * keys_attended(spec["prompt_len"])
    check = prompts_for(cfg, 1, spec["prompt_len"] // 2, seed=1)
    out, profiles, tokens = {}, {}, {}
    for name, kw in BIG_FORMS:
        if kw.get("pdl") and not pdl_supported(torch.device(device)):
            continue
        runner = cg.DecodeGraphRunner(model, 1, spec["max_seq"], sizes=[1], verbose=False, **kw)
        tokens[name] = runner.generate(check, spec["check_tokens"])
        runner.generate(prompts_for(cfg, 1, spec["prompt_len"]), 2)
        t = time_steps(runner.step, cfg, 1, spec["prompt_len"], device, spec["repeat"])
        gbs = read / t.median_s / 1e9
        results.append(bench.Case(f"{big}/{name}/b1", t, {
            "preset": big, "variant": name, "batch": 1, "tokens_per_s": 1 / t.median_s,
            "ms_per_step": t.median_s * 1e3, "bytes_per_token": read, "gbs": gbs,
            "fraction_of_copy": gbs / copy_gbs}).as_dict())
        out[name] = (t.median_s, gbs)
        profiles[name] = kernel_profile(lambda: runner.step(*_one(cfg, device)))
        if kw.get("fuse"):
            cg.fuse_layers(model, enable=False)
        del runner
    best = min(out, key=lambda k: out[k][0])
    summary = {"hbm_variant": best, "hbm_gbs": out[best][1], "hbm_fraction": out[best][1] / copy_gbs,
               "big_ms_per_token": out[best][0] * 1e3, "profile_big_b1": profiles[best],
               "big_profiles": profiles,
               # bf16 greedy tokens of each form against the model's own step (the eager step's tokens)
               "big_token_agreement": {k: agreement(v, tokens["graph"]) for k, v in tokens.items()}}
    del model
    free()
    return summary
