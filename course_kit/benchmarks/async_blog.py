"""The async-batching blog's case, in one run: the course engine and HF continuous batching, each
sync and async, on one workload (issue 20; `course-kit bench async`, notebook 07).

The lecture's claim (CLAIM, cited, never measured here): Hugging Face's post "Unlocking asynchronicity
in continuous batching" reports, for an 8B model at batch size 32, GPU idle 24% of the time with
synchronous continuous batching and 0.6% with its asynchronous mode, and 22% less generation time.

This module reproduces the set-up at a size that fits a few minutes of an H200: the Llama-3-8B shape
with seeded random weights, 32 requests in 32 slots, short prompts, `new_tokens` each (EOS ignored).
Four runs on the same prompts:

- the course engine (`AsyncEngine`) in its sync and async modes;
- HF transformers' continuous batching (`continuous_batching_context_manager`, the machinery of
  `generate_batch`) with `use_async_batching=False` and `=True`, where the installed release has
  that field; a mode that fails is recorded with its error, the others still run.

Each run is timed unprofiled (throughput); then a shorter run (`profiled new tokens`) is timed
unprofiled and run again under `torch.profiler`, to read the GPU's idle fraction the same way for all
four: 1 - (union of GPU kernel and copy intervals) / (the run's window) (`profiling`), with the
profiler's overhead (profiled against unprofiled wall time of that shorter run) beside it. The
engine's own step-bracket timeline of the timed run is kept as the host's picture
(`engine_host_step_gap_fraction`), never as GPU idle. Tokens: engine sync and async must be
identical; HF sync against async, and HF against the engine, are reported as the share of tokens
that agree (bf16 on random weights has near-ties).
"""
from __future__ import annotations

import inspect
import time
from typing import Callable

import torch

from ..engine import SamplingParams
from ..streams.async_loop import AsyncEngine
from ..models import llama
from .. import profiling
from .batching import drain_requests, hf_cpu_cache_sizes
from ..device import default_device, has_cuda
from ..models.hf import model_to_hf

CLAIM = {"source": "Hugging Face blog, R. Ouazan Reboul, P. Cuenca, A. Roy Gosthipaty, "
                   "'Unlocking asynchronicity in continuous batching', 14 May 2026",
         "model": "8B", "batch": 32, "sync_gpu_idle": 0.24, "async_gpu_idle": 0.006,
         "sync_s": 300.6, "async_s": 234.5, "time_saved": 0.22}

# the Llama-3-8B shape (published config: 32 layers, 4096 wide, 32 query / 8 KV heads, 14336 FFN)
LLAMA3_8B = dict(vocab_size=128256, dim=4096, n_layers=32, n_heads=32, n_kv_heads=8, ffn_dim=14336,
                 rope_theta=500000.0, max_seq_len=8192, tie_embeddings=False, name="llama-3-8b")

SIZES = {   # (model config or preset, requests = slots, prompt length range, new tokens, profiled new tokens)
    "full": ("llama-3-8b", 32, (128, 512), 256, 64),
    "small_gpu": ("llama-1b", 32, (128, 512), 128, 32),
    "cpu": ("tiny", 4, (8, 32), 12, 6),
    "smoke": ("tiny", 4, (8, 32), 6, 4),
}


def build_model(name: str, dtype: torch.dtype, device: str) -> llama.Transformer:
    if name == "llama-3-8b":
        cfg = llama.ModelConfig(**LLAMA3_8B, rope_scaling=dict(llama.LLAMA3_SCALING))
        return llama.Transformer.from_config(cfg, seed=0, dtype=dtype, device=device)
    return llama.Transformer.from_preset(name, seed=0, dtype=dtype, device=device)


def _sync() -> None:
    if has_cuda():
        torch.cuda.synchronize()


def _timed(run: Callable[[], list[list[int]]]) -> tuple[list[list[int]], float]:
    _sync()
    t0 = time.perf_counter()
    out = run()
    _sync()
    return out, time.perf_counter() - t0


def measure(run: Callable[[list[list[int]], int], list[list[int]]], prompts: list[list[int]], new: int,
            new_profiled: int, label: str, after_timed: Callable[[], dict] | None = None) -> dict:
    """Warm up, time one run (then `after_timed()` adds its figures); on a GPU, time a shorter one
    unprofiled and profile it for the GPU idle fraction and the profiler's overhead."""
    run(prompts[:2], 4)
    tokens, wall = _timed(lambda: run(prompts, new))
    if [len(t) for t in tokens] != [new] * len(prompts):
        raise AssertionError(f"{label}: output lengths differ from the {new} tokens asked for")
    extra = after_timed() if after_timed is not None else {}
    idle = {}
    if has_cuda():
        _, short_s = _timed(lambda: run(prompts, new_profiled))
        prof = profiling.profile_run(lambda: run(prompts, new_profiled), unprofiled_s=short_s)
        idle = {**profiling.record_fields(prof.summary), "profiled_new_tokens": new_profiled}
    return {"tokens": tokens, "wall_s": wall, "tokens_per_s": len(prompts) * new / wall, **idle, **extra}


def engine_runner(eng: AsyncEngine, mode: str):
    """Run the prompts through `eng` in `mode` (one engine for both modes: compiled and captured once)."""
    def run(prompts, new):
        eng.mode = mode
        outs = eng.generate(prompts, SamplingParams(max_new_tokens=new, ignore_eos=True))
        return [o.tokens for o in outs]
    return run


def hf_runner(hf, slots: int, use_async: bool, hints: tuple[int, int, int]):
    """HF continuous batching with `use_async_batching` set; returns (run, settings actually used)."""
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig
    fields = inspect.signature(ContinuousBatchingConfig).parameters
    if "use_async_batching" not in fields:
        raise RuntimeError("this transformers release has no use_async_batching in ContinuousBatchingConfig")
    cuda = hf.device.type == "cuda"
    wanted = {"use_async_batching": use_async, "use_cuda_graph": cuda, "auto_switch_to_flash": True,
              "max_requests_per_batch": slots}
    if not cuda:
        wanted.update(hf_cpu_cache_sizes(hints))
    settings = {k: v for k, v in wanted.items() if k in fields}
    used = dict(settings)          # what was asked, and what HF decided (filled in by a run)
    cm = hf.continuous_batching_context_manager
    sig = inspect.signature(cm).parameters
    if hasattr(hf, "destroy_cached_continuous_batching_manager"):
        hf.destroy_cached_continuous_batching_manager()   # a kept manager would carry the other mode's config

    def run(prompts, new):
        cfg = ContinuousBatchingConfig(**settings)
        kwargs = {"generation_config": GenerationConfig(do_sample=False, max_new_tokens=new, eos_token_id=-1),
                  "continuous_batching_config": cfg, "block": True, "timeout": 10}
        if "persistent_manager" in sig:   # keep the warmed manager (CUDA graphs) for the timed call
            kwargs["persistent_manager"] = True
        if "warmup" in sig:
            kwargs["warmup"] = cuda        # CUDA graph capture; nothing to warm on a CPU
        if "workload_hints" in sig:
            from transformers.generation.continuous_batching.utils import WorkloadHints
            kwargs["workload_hints"] = WorkloadHints(max_prompt_length=hints[0], max_generated_length=hints[1],
                                                     num_requests=hints[2])
        with cm(**kwargs) as manager:
            tokens = drain_requests(manager, prompts, [new] * len(prompts), timeout_s=1800)
        mgr = getattr(hf, "_cached_continuous_batching_manager", None)    # the manager really used
        used["use_async_batching_decided"] = getattr(getattr(mgr, "continuous_batching_config", None),
                                                     "use_async_batching", cfg.use_async_batching)
        return tokens
    return run, used


def agreement(a: list[list[int]], b: list[list[int]]) -> float:
    pairs = [(x, y) for ta, tb in zip(a, b) for x, y in zip(ta, tb)]
    return sum(x == y for x, y in pairs) / max(1, len(pairs))


def run_blog_case(size: str, dtype: torch.dtype, workload: Callable) -> dict:
    """The four runs; returns {"rows", "summary"} for the async record (a failed run is a row with its error)."""
    name, slots, (lo, hi), new, new_prof = SIZES[size]
    dev = default_device()
    model = build_model(name, dtype, dev)
    prompts = workload(slots, lo, hi, model.config.vocab_size, seed=1)
    rows, tokens = [], {}

    def record(system: str, mode: str, fn: Callable[[], dict], extra: dict | None = None) -> None:
        try:
            m = fn()
            tokens[(system, mode)] = m.pop("tokens")
            rows.append({"system": system, "mode": mode, "model": name, "batch": slots, "new_tokens": new,
                         **m, **(extra or {})})
        except Exception as err:  # noqa: BLE001 - a failing mode is a finding, recorded
            rows.append({"system": system, "mode": mode, "model": name, "batch": slots,
                         "error": f"{type(err).__name__}: {err}"[:600], **(extra or {})})

    max_len = hi + new
    eng = AsyncEngine(model, mode="sync", policy="continuous", max_num_seqs=slots,
                      max_num_batched_tokens=max(2048, slots), max_model_len=max_len)
    for mode in ("sync", "async"):
        run = engine_runner(eng, mode)
        # beside the profiler's figure, the engine's own timeline (CUDA events) of the timed run:
        # the host's picture, its gaps between step brackets
        record("course engine", mode, lambda: measure(
            run, prompts, new, new_prof, f"engine {mode}",
            after_timed=lambda: {"engine_host_step_gap_fraction": eng.timing()["host_step_gap_fraction"]}))
    del eng
    try:
        hf = model_to_hf(model)
    except Exception as err:  # noqa: BLE001 - e.g. out of memory: the engine's rows stand
        rows += [{"system": "HF generate_batch", "mode": m, "model": name, "batch": slots,
                  "error": f"conversion to transformers failed: {type(err).__name__}: {err}"[:600]}
                 for m in ("sync", "async")]
        hf = None
    del model
    if dev == "cuda":
        torch.cuda.empty_cache()
    for mode in ("sync", "async") if hf is not None else ():
        try:
            run, settings = hf_runner(hf, slots, mode == "async", (hi, new, slots))
        except Exception as err:  # noqa: BLE001 - no async field in this release: recorded
            rows.append({"system": "HF generate_batch", "mode": mode, "model": name, "batch": slots,
                         "error": f"{type(err).__name__}: {err}"[:600]})
            continue
        record("HF generate_batch", mode, lambda: measure(run, prompts, new, new_prof, f"hf {mode}"),
               {"settings": settings})
    if hf is not None and hasattr(hf, "destroy_cached_continuous_batching_manager"):
        hf.destroy_cached_continuous_batching_manager()
    del hf
    if dev == "cuda":
        torch.cuda.empty_cache()
    eng_s, eng_a = tokens.get(("course engine", "sync")), tokens.get(("course engine", "async"))
    hf_s, hf_a = tokens.get(("HF generate_batch", "sync")), tokens.get(("HF generate_batch", "async"))
    summary = {"claim": CLAIM, "model": name, "batch": slots, "new_tokens": new, "prompt_len": [lo, hi],
               "engine_tokens_identical": eng_s is not None and eng_s == eng_a,
               "hf_sync_async_agreement": agreement(hf_s, hf_a) if hf_s and hf_a else None,
               "engine_hf_agreement": agreement(eng_s, hf_s) if eng_s and hf_s else None,
               "dtype": str(dtype).replace("torch.", "")}
    return {"rows": rows, "summary": summary}
