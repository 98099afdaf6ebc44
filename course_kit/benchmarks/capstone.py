"""`course-kit bench capstone`: the course engine against HF transformers on one workload.

One seeded workload (prompt and output lengths uniform in ranges, EOS ignored, all requests at
t=0). Variants, all in one run on the same requests:

- HF `generate`: static batches, left-padded (the peer most people start from);
- HF `generate_batch`: transformers' continuous batching, at its best settings here (the helper of
  the batching topic: CUDA graphs on, the best attention available);
- the course engine, adding one technique at a time: continuous batching + paged KV cache (sync,
  no CUDA graphs) -> + CUDA graphs for decode -> + fused blocks (Inductor around attention) ->
  + the async loop. On a GPU its attention is the Triton kernels of notebook 06, which read the
  paged cache directly for decodes and prefill chunks alike.

Correctness first: in fp32, on a few requests, every engine variant must give HF generate's greedy
tokens. Throughput is output tokens / wall time (synchronised), the same clock for every variant.

GPU idle per engine variant comes from a separate profiled pass (`profiling`: union of kernel and
copy intervals over the run's window, split into between and within steps, with the profiler's
overhead), on the same prompts with at most `profile_tokens` new tokens each (a whole run's trace
would be gigabytes), timed unprofiled too. The engine's step-bracket timeline is kept as the host's
picture (`host_step_gap_fraction`).
"""
from __future__ import annotations

import time
from typing import Callable, Sequence

import torch

from .. import bench, profiling
from .. import device as _device
from ..capstone import ladder
from ..device import has_cuda
from ..engine import SamplingParams, trace
from ..models import llama
from ..models.hf import model_to_hf
from ..streams.async_loop import AsyncEngine
from .batching import _sync, check_fp32_against_hf, hf_generate_batch, hf_generate_static, time_peer


def _defaults(size: str, cuda: bool) -> dict:
    if cuda and size in ("full", "small_gpu"):
        return {"preset": "smollm-135m", "n_requests": 64,
                "prompt_len": [100, 512], "output_len": [100, 512], "seed": 0, "max_num_seqs": 64,
                "max_num_batched_tokens": 2048, "check_requests": 4, "check_tokens": 24,
                "hf_generate_batch": True, "profile_tokens": 64}
    return {"preset": "tiny", "n_requests": 6 if size == "smoke" else 12,
            "prompt_len": [4, 32], "output_len": [4, 16 if size == "smoke" else 32], "seed": 0,
            "max_num_seqs": 4, "max_num_batched_tokens": 128, "check_requests": 2,
            "check_tokens": 6, "hf_generate_batch": size != "smoke", "profile_tokens": 8}


def engine_variants(cuda: bool) -> dict[str, dict]:
    """Name -> how the engine is built; each adds one technique to the previous one.

    All three are `AsyncEngine`, whose sync mode is the same staged step loop as notebook 06's
    `Engine` (with the same timeline recording as the async mode), so that exactly one thing
    changes from one variant to the next.
    """
    v = {"engine: continuous + paged KV": {"cls": AsyncEngine, "cuda_graphs": False, "fuse": False,
                                           "mode": "sync"}}
    if cuda:
        v["engine: + CUDA graphs"] = {"cls": AsyncEngine, "cuda_graphs": True, "fuse": False, "mode": "sync"}
        v["engine: + fused blocks"] = {"cls": AsyncEngine, "cuda_graphs": True, "fuse": True, "mode": "sync"}
    v["engine: + async loop"] = {"cls": AsyncEngine, "cuda_graphs": cuda, "fuse": cuda, "mode": "async"}
    return v


def _build(model, spec: dict, opts: dict):
    kw = {k: v for k, v in spec.items() if k != "cls"}
    return spec["cls"](model, **opts, **kw)


def _profiled_idle(eng, prompts: list[list[int]], news: list[int], cap: int) -> dict:
    """GPU idle of `eng` on the prompts with at most `cap` new tokens each: timed, then profiled."""
    short = [SamplingParams(max_new_tokens=min(n, cap), ignore_eos=True) for n in news]
    _sync()
    t0 = time.perf_counter()
    eng.generate(prompts, short)
    _sync()
    prof = profiling.profile_run(lambda: eng.generate(prompts, short), unprofiled_s=time.perf_counter() - t0)
    return {**profiling.record_fields(prof.summary), "profiled_new_tokens_cap": cap}


@bench.topic("capstone", help="the course engine (all techniques) against HF generate and generate_batch")
def run(params: dict) -> dict:
    # On a CPU every variant runs with one torch thread: the async engine's worker thread does
    # (so that the host keeps a core), and a fair comparison gives the others the same.
    threads = torch.get_num_threads()
    if not has_cuda():
        torch.set_num_threads(1)
    try:
        return _run(params)
    finally:
        torch.set_num_threads(threads)


def _engine_row(name: str, eng, prompts: list, news: list[int], sampling: list, p: dict, cuda: bool) -> dict:
    """One engine variant timed on the workload (warm-up first, one synchronised clock), then its
    GPU idle from a separate profiled pass on a GPU."""
    eng.generate(prompts[:2], [SamplingParams(max_new_tokens=4)] * 2)   # warm-up, graphs
    _sync()
    t0 = time.perf_counter()
    outs = eng.generate(prompts, sampling)
    _sync()
    dt = time.perf_counter() - t0
    if [len(o.tokens) for o in outs] != news:
        raise AssertionError(f"{name}: output lengths differ from the requested ones")
    s = eng.summary(outs)
    row = {"name": name, "kind": "course engine", "duration_s": dt, "throughput_tok_s": sum(news) / dt,
           "ttft_p50_s": s["ttft_p50_s"], "tpot_p50_s": s["tpot_p50_s"], "steps": s["steps"],
           "host_step_gap_fraction": eng.timing()["host_step_gap_fraction"]}
    if cuda:
        row.update(_profiled_idle(eng, prompts, news, p["profile_tokens"]))
    return row


def _peer_rows(name: str, hf, prompts: list, news: list[int], p: dict, cuda: bool) -> list[dict]:
    """An HF peer timed on the same workload: generate (static batches), or generate_batch with
    the same workload hints for the warm-up and the timed call and its manager kept warm between
    them (CUDA graphs captured once), as the batching topic does; a failure is a row that says why."""
    if name == "HF generate_batch" and not p.get("hf_generate_batch", True):
        return [{"name": name, "kind": "HF peer", "skipped": "off at this size"}]
    hints = (max(len(x) for x in prompts), max(news), len(prompts))
    attempts = ([("HF generate", lambda ps, ns: hf_generate_static(hf, ps, ns, p["max_num_seqs"]))]
                if name == "HF generate" else
                [("HF generate_batch", lambda ps, ns: hf_generate_batch(hf, ps, ns, hints=hints, keep=True)),
                 ("HF generate_batch (CUDA graphs off after a failure)",
                  lambda ps, ns: hf_generate_batch(hf, ps, ns, hints=hints, keep=True, graphs=False))])
    rows = []
    for label, fn in attempts[:1 if not cuda else None]:
        try:
            dt, extra = time_peer(fn, prompts, news)
        except Exception as err:  # noqa: BLE001 - a peer failing must not lose the other figures
            rows.append({"name": label, "kind": "HF peer", "skipped": f"{type(err).__name__}: {err}"[:500]})
            if hasattr(hf, "destroy_cached_continuous_batching_manager"):
                hf.destroy_cached_continuous_batching_manager()
            continue
        rows.append({"name": label, "kind": "HF peer", "duration_s": dt,
                     "throughput_tok_s": sum(news) / dt, **extra})
        break
    if hasattr(hf, "destroy_cached_continuous_batching_manager"):
        hf.destroy_cached_continuous_batching_manager()
    return rows


def _summary(results: list[dict], variants: dict, checks: dict, ties: int, n_tokens: int) -> dict:
    thr = {r["name"]: r["throughput_tok_s"] for r in results if "throughput_tok_s" in r}
    full = list(variants)[-1]
    summary = {"correct_fp32": checks, "fp32_numerical_ties": ties, "throughput_tok_s": thr,
               "output_tokens": n_tokens, "full_engine": full}
    for peer in ("HF generate", "HF generate_batch"):
        measured = [n for n in thr if n.startswith(peer) and (peer != "HF generate" or n == peer)]
        if measured:
            summary[f"engine_vs_{peer.replace(' ', '_')}"] = thr[full] / thr[measured[0]]
    base = "engine: continuous + paged KV"
    for name in variants:
        summary[f"speedup_vs_engine_base::{name}"] = thr[name] / thr[base]
    summary["torch_threads"] = torch.get_num_threads()
    return summary


def _run(params: dict) -> dict:
    cuda = has_cuda() and str(params.get("device", "cuda")).startswith("cuda")
    p = {**_defaults(params.get("size", "cpu"), cuda),
         **{k: v for k, v in params.items() if k not in ("size", "device")}}
    dev = "cuda" if cuda else "cpu"
    dtype = p["dtype"] = _device.param_dtype(p)
    model = llama.Transformer.from_preset(p["preset"], seed=p["seed"], dtype=dtype, device=dev)
    work = trace.synthetic(p["n_requests"], tuple(p["prompt_len"]), tuple(p["output_len"]),
                           model.config.vocab_size, seed=p["seed"])
    prompts, news = [r.prompt for r in work], [r.max_new_tokens for r in work]
    opts = dict(max_num_seqs=p["max_num_seqs"], max_num_batched_tokens=p["max_num_batched_tokens"],
                max_model_len=max(len(x) for x in prompts) + max(news))
    variants = engine_variants(cuda)

    # correctness: fp32, every engine variant token-identical to HF generate (or at a tie)
    checks, ties, _ = check_fp32_against_hf(p, prompts, dev, {
        name: (lambda m, spec=spec: _build(m, spec, opts)) for name, spec in variants.items()})
    hf = model_to_hf(model)

    # timed runs, one clock for all: output tokens / synchronised wall time
    results: list[dict] = []
    sampling = [SamplingParams(max_new_tokens=n, ignore_eos=True) for n in news]
    timeline = None
    for name in bench.progress(list(variants) + ["HF generate", "HF generate_batch"], desc="capstone"):
        if name not in variants:
            results += _peer_rows(name, hf, prompts, news, p, cuda)
            continue
        eng = _build(model, variants[name], opts)
        results.append(_engine_row(name, eng, prompts, news, sampling, p, cuda))
        if name == list(variants)[-1]:
            timeline = eng.timeline.shifted().to_records(max_spans=600)
        del eng
    summary = _summary(results, variants, checks, ties, sum(news))
    return {"params": p, "results": results, "summary": summary, "timeline": timeline}


def live_run(enabled: Sequence[str], n_requests: int = 6, seed: int = 0,
             progress: Callable[[int, int], None] | None = None) -> dict[str, float]:
    """Notebook 10's live ladder (the widget's Run button): throughput (tok/s) of HF generate and of
    the engine variants that run here and whose techniques are all switched on, the tiny model, a few
    requests, one clock."""
    cuda = has_cuda()
    dev = "cuda" if cuda else "cpu"
    model = llama.Transformer.from_preset("tiny", seed=seed, device=dev)
    work = trace.synthetic(n_requests, (4, 32), (4, 16), model.config.vocab_size, seed=seed)
    prompts, news = [r.prompt for r in work], [r.max_new_tokens for r in work]
    opts = dict(max_num_seqs=4, max_num_batched_tokens=128, max_model_len=max(map(len, prompts)) + max(news))
    needs = {"engine: continuous + paged KV": {"continuous batching + paged KV"},
             "engine: + CUDA graphs": {"continuous batching + paged KV", "CUDA graphs"},
             "engine: + fused blocks": {"continuous batching + paged KV", "CUDA graphs", "fused blocks"},
             "engine: + async loop": set(ladder.TECHNIQUES) if cuda else {"continuous batching + paged KV", "async loop"}}
    todo = [n for n, spec in engine_variants(cuda).items() if needs[n] <= set(enabled)]
    out: dict[str, float] = {}
    total = len(todo) + 1
    hf = model_to_hf(model)
    dt, _ = time_peer(lambda ps, ns: hf_generate_static(hf, ps, ns, 4), prompts, news)
    out["HF generate"] = sum(news) / dt
    if progress:
        progress(1, total)
    variants = engine_variants(cuda)
    for i, name in enumerate(todo, 2):
        eng = _build(model, variants[name], opts)
        eng.generate(prompts[:2], [SamplingParams(max_new_tokens=2)] * 2)          # warm-up
        t0 = time.perf_counter()
        eng.generate(prompts, [SamplingParams(max_new_tokens=n, ignore_eos=True) for n in news])
        if cuda:
            torch.cuda.synchronize()
        out[name] = sum(news) / (time.perf_counter() - t0)
        if progress:
            progress(i, total)
    return out
