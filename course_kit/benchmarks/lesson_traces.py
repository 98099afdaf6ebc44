"""`course-kit bench traces`: the profiler traces that notebooks 03, 05, 07 and 10 show, and their
summaries, recorded on their own so that they do not depend on executing a notebook.

Each lesson's own code runs in a profiled pass of its own (`profiling.profile_steps` or
`profile_run`, each step marked "step k"), after an unprofiled timing of the same work:

- 03: the fused elementwise chain `bias + GELU + residual`, eager and compiled (`default`);
- 05: one decode step at batch 1, eager and replayed as a CUDA graph (`DecodeGraphRunner`), and the
  eager step at batch 4 that exercise 05.read_trace reads (`05-exercise`);
- 07: the engine's sync and async loops on the same requests;
- 10: the full engine of the capstone (CUDA graphs, fused blocks, async loop), one run.

It keeps a few steps from the middle of each trace in `<trace_dir>/<lesson>-<variant>.trace.json.gz` (under 2 MB,
for https://ui.perfetto.dev) and records every summary: GPU idle (named by its method) split between
and within steps, kernels per step, launch gaps, top kernels, the profiler's overhead. On a CPU the
same code profiles the CPU operators (the learner's own trace, and how the topic is tested).
Notebooks call `profile_lesson` to profile the lesson's code live.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch

from .. import bench, profiling
from ..device import has_cuda
from ..profiling import files

LESSONS = ("03", "05", "07", "10")
# per size: chain rows x cols (03), model preset (05, 07, 10), engine batch, new tokens, profiled steps,
# and the decode runner's cache length (05): on a GPU the 512 positions of notebook 05's runner and of
# the cuda_graphs record, so that the traced step attends over the same cache as the step they time
SIZES = {
    "smoke": {"chain": (64, 128), "preset": "tiny", "batch": 2, "new_tokens": 4, "steps": 3, "max_seq": 64},
    "cpu": {"chain": (512, 1024), "preset": "tiny", "batch": 4, "new_tokens": 8, "steps": 4, "max_seq": 64},
    "small_gpu": {"chain": (4096, 4096), "preset": "smollm-135m", "batch": 32, "new_tokens": 32, "steps": 5,
                  "max_seq": 512},
    "full": {"chain": (8192, 8192), "preset": "smollm-135m", "batch": 32, "new_tokens": 32, "steps": 5,
             "max_seq": 512},
}


def _spec(params: dict) -> dict:
    size = params.get("size", "cpu")
    if size not in SIZES:
        raise ValueError(f"size={size!r}; choose one of {sorted(SIZES)}")
    return {**SIZES[size], **{k: v for k, v in params.items() if k in SIZES["full"] or k == "exercise"}}


def _chain(spec: dict, dtype: torch.dtype, dev: str) -> list[tuple[str, str, profiling.Profile]]:
    from .. import compile_modes as cm
    rows, cols = spec["chain"]
    g = torch.Generator().manual_seed(0)
    x, bias, res = (torch.randn(*shape, generator=g).to(dev) for shape in ((rows, cols), (cols,), (rows, cols)))
    compiled = torch.compile(cm.bias_gelu_residual)
    out = []
    for variant, fn in (("eager", cm.bias_gelu_residual), ("default", compiled)):
        prof = profiling.profile_steps(lambda fn=fn: fn(x, bias, res), steps=spec["steps"], warmup=2)
        out.append((variant, f"bias + GELU + residual on {rows} x {cols} fp32, {variant}", prof))
    return out


def _decode(spec: dict, dtype: torch.dtype, dev: str) -> list[tuple[str, str, profiling.Profile]]:
    from ..cuda_graphs import runner as cg
    from ..models import llama
    model = llama.Transformer.from_preset(spec["preset"], seed=0, dtype=dtype, device=dev)
    # (variant, CUDA graphs, batch); "exercise": the step notebook 05's exercise 05.read_trace reads,
    # at another batch than the lesson shows, so that no answer is displayed above the exercise
    variants = [("eager", False, 1)] + ([("graph", True, 1)] if dev == "cuda" else [])
    variants += [("exercise", False, 4)] if spec.get("exercise") else []
    out = []
    for variant, graphs, b in variants:
        r = cg.DecodeGraphRunner(model, max_batch=b, max_seq=spec["max_seq"], use_graphs=graphs, verbose=False)
        r.generate([[1] * 8] * b, 2)
        tok = torch.ones(b, dtype=torch.long, device=dev)
        pos = torch.full((b,), 9, device=dev)
        prof = profiling.profile_steps(lambda r=r: r.step(tok, pos), steps=spec["steps"], warmup=2)
        out.append((variant, f"{spec['preset']} decode step, batch {b}, {'eager' if not graphs else 'graph'}", prof))
    return out


def _engine_run(eng, prompts: list[list[int]], new: int) -> profiling.Profile:
    import time
    from ..engine import SamplingParams
    sp = SamplingParams(max_new_tokens=new, ignore_eos=True)
    eng.generate(prompts[:2], SamplingParams(max_new_tokens=2, ignore_eos=True))   # warm-up, graphs
    sync = torch.cuda.synchronize if has_cuda() else (lambda: None)
    sync()
    t0 = time.perf_counter()
    eng.generate(prompts, sp)
    sync()
    unprofiled = time.perf_counter() - t0
    return profiling.profile_run(lambda: eng.generate(prompts, sp), unprofiled_s=unprofiled)


def _prompts(n: int, vocab: int, lo: int = 8, hi: int = 64) -> list[list[int]]:
    g = torch.Generator().manual_seed(0)
    return [torch.randint(3, vocab, (int(k),), generator=g).tolist() for k in torch.randint(lo, hi, (n,), generator=g)]


def _engine(spec: dict, dtype: torch.dtype, dev: str) -> list[tuple[str, str, profiling.Profile]]:
    from ..streams.async_loop import AsyncEngine
    from ..models import llama
    model = llama.Transformer.from_preset(spec["preset"], seed=0, dtype=dtype, device=dev)
    prompts = _prompts(2 * spec["batch"], model.config.vocab_size)
    eng = AsyncEngine(model, mode="sync", max_num_seqs=spec["batch"],
                      max_model_len=max(map(len, prompts)) + spec["new_tokens"])
    out = []
    for mode in ("sync", "async"):
        eng.mode = mode
        out.append((mode, f"engine, {spec['preset']}, batch {spec['batch']}, {mode} loop",
                    _engine_run(eng, prompts, spec["new_tokens"])))
    return out


def _full_engine(spec: dict, dtype: torch.dtype, dev: str) -> list[tuple[str, str, profiling.Profile]]:
    from ..streams.async_loop import AsyncEngine
    from ..models import llama
    from .capstone import engine_variants
    model = llama.Transformer.from_preset(spec["preset"], seed=0, dtype=dtype, device=dev)
    prompts = _prompts(2 * spec["batch"], model.config.vocab_size, *((32, 256) if dev == "cuda" else (8, 32)))
    name, v = list(engine_variants(dev == "cuda").items())[-1]
    eng = AsyncEngine(model, max_num_seqs=spec["batch"], max_model_len=max(map(len, prompts)) + spec["new_tokens"],
                      **{k: val for k, val in v.items() if k != "cls"})
    return [("full", f"{name} ({spec['preset']}, batch {spec['batch']})", _engine_run(eng, prompts, spec["new_tokens"]))]


RUNS: dict[str, Callable] = {"03": _chain, "05": _decode, "07": _engine, "10": _full_engine}


def profile_lesson(lesson: str, params: dict) -> list[dict]:
    """Profile one lesson's own code on this machine: a row per variant, with its summary and the
    whole trace under "trace" (kept in memory, for a notebook to draw and save)."""
    if lesson not in RUNS:
        raise ValueError(f"lesson={lesson!r}; choose one of {list(RUNS)}")
    spec = _spec(params)
    dev = "cuda" if has_cuda() else "cpu"
    dtype = torch.float32 if lesson == "03" else params.get("dtype", torch.float32)
    rows = []
    for variant, what, prof in RUNS[lesson](spec, dtype, dev):
        rows.append({"name": f"{lesson}-{variant}", "lesson": lesson, "variant": variant, "what": what,
                     **prof.summary, "trace": prof.trace})
    return rows


def save_row(row: dict, where: Path | str, steps: int = 3) -> Path:
    """Keep a profiled row's trace (`steps` steps from its middle, gzipped) as <where>/<name>.trace.json.gz."""
    return files.save(row["trace"], row["name"], where=where, steps=steps)


@bench.topic("traces", help="profiler traces of notebooks 03, 05, 07 and 10, kept for Perfetto, with summaries")
def run(params: dict) -> dict:
    lessons = [str(x) for x in params.get("lessons", LESSONS)]
    where = Path(params.get("trace_dir") or files.folder())
    results = []
    for lesson in bench.progress(lessons, desc="traces", disable=not params.get("progress", True)):
        try:
            rows = profile_lesson(lesson, {**params, "exercise": True})
        except Exception as err:  # noqa: BLE001 - one lesson failing must not lose the others
            results.append({"name": lesson, "lesson": lesson, "error": f"{type(err).__name__}: {err}"[:600]})
            continue
        for row in rows:
            path = save_row(row, where, steps=1 if lesson == "10" else 3)
            row.pop("trace")
            row.update(trace_file=path.name, trace_bytes=path.stat().st_size, **profiling.record_fields(row))
            results.append(row)
    summary = {r["name"]: {k: r.get(k) for k in ("idle_fraction", "idle_between_steps", "idle_within_steps",
                                                 "kernels_per_step", "profiler_overhead", "method")}
               for r in results if "error" not in r}
    return {"params": {"lessons": lessons, **_spec(params)}, "results": results, "summary": summary}
