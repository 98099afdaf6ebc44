"""`course-kit bench compile`: torch.compile's modes on a batch-1 decode step and a training step.

Each mode compiles cold (its own empty Inductor/Triton cache folder), is checked against eager
(decode logits over 16 positions; the first training step's loss), then timed: compile time apart
from steady state. On a GPU it also counts launches, GPU kernels and GPU kernel time per call with
the profiler and keeps the top kernels; the summary's `explain` compares the autotuned training step
with `default` kernel by kernel (compile_modes.explain). Acceptance: reduce-overhead decode >= 3x
eager; max-autotune(-no-cudagraphs) training step >= 1.2x eager. The max-autotune rows carry what
autotuning benchmarked and chose per op (`autotune_choices`, compile_modes.autotune).
"""
from __future__ import annotations

import contextlib
import tempfile
import time

import torch

from .. import bench
from .. import device as _device
from ..compile_modes import GPU_MODES, check_mode, compile_with_mode, fresh_caches, graph_report
from ..compile_modes.autotune import autotune_choices, clear_autotune_memory, summarise_choices
from ..compile_modes.explain import explain_train
from ..compile_modes.kernels import profile_launches
from ..compile_modes.workloads import decode_reference, decode_setup, make_train_step, train_setup
from ..device import default_device

# max-autotune (autotuning + CUDA graphs) can be added with params {"decode_modes": [...]}: it is left
# out by default to keep the run near three minutes.
DECODE_MODES = ["eager", "default", "reduce-overhead"]
# max-autotune with CUDA graphs on the training step (issue 20): its compile costs minutes, like
# max-autotune-no-cudagraphs; each row records what autotuning chose (compile_modes.autotune).
TRAIN_MODES = ["eager", "default", "max-autotune-no-cudagraphs", "max-autotune"]
# A GPT-2-small-like width with few layers: compile time grows with the layers Dynamo unrolls, and
# every layer has the same matmul shapes, so autotuning work does not.
DECODE_MODEL = dict(preset="small_gpu", d_model=768, n_heads=12, n_layers=6, vocab=32768, seq_len=1024)
TRAIN_MODEL = dict(preset="small_gpu", d_model=768, n_heads=12, n_layers=4, vocab=32768, seq_len=1024)


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


@contextlib.contextmanager
def _autotune_limits(mode: str):
    """Keep max-autotune's search short: GEMM candidates from cuBLAS (ATEN) and Triton templates only
    (no CUTLASS/CK/C++ backends, which compile slowly), their default candidate list (no exhaustive
    search), no coordinate-descent tuning. Keys this torch lacks are left alone."""
    cfg = torch._inductor.config
    patch = {k: v for k, v in {"max_autotune_gemm_backends": "ATEN,TRITON",
                               "max_autotune_gemm_search_space": "DEFAULT",
                               "coordinate_descent_tuning": False}.items() if hasattr(cfg, k)}
    if "max-autotune" in mode and patch:
        with cfg.patch(patch):
            yield
    else:
        yield


def _skips() -> int:
    from torch._dynamo.utils import counters
    return int(sum(counters["inductor"].get(k, 0) for k in ("cudagraph_skips",)))


def measure_decode(modes: list[str], device: str, spec: dict, repeat: int,
                   cache_root: str | None = None, dtype: "torch.dtype | str | None" = None
                   ) -> tuple[list[dict], dict]:
    """Per mode: correctness against eager over 16 positions, compile and steady time, launches.
    spec: {"preset": ..., field overrides}. Returns (rows, graph report of the step)."""
    spec = dict(spec)
    # the device's compute dtype (device.defaults): bf16, fp16 on a T4, fp32 on a CPU
    dtype = _device.param_dtype({"dtype": dtype})
    preset = spec.pop("preset")
    step, inputs = decode_setup(preset, device=device, dtype=dtype, **spec)
    ref = decode_reference(step, inputs)
    graphs = graph_report(step, *inputs[0])
    step.reset()
    rows = []
    for mode in bench.progress(modes, desc="decode modes"):
        if mode in GPU_MODES and device != "cuda":
            rows.append({"name": f"decode {mode}", "mode": mode, "skipped": "needs a CUDA GPU"})
            continue
        torch._dynamo.reset()
        step.reset()
        skips0 = _skips()
        with fresh_caches(cache_root), _autotune_limits(mode):
            f = compile_with_mode(step, mode)
            with torch.no_grad():
                _sync(device)
                t0 = time.perf_counter()
                first = f(*inputs[0]).clone()  # clone: CUDA-graph outputs are overwritten by the next replay
                _sync(device)
                first_s = time.perf_counter() - t0
                outs = torch.stack([first] + [f(*a).clone() for a in inputs[1:]])
                err = (outs.float() - ref.float()).abs().max().item()
                scale = ref.float().abs().max().item()
                timing = bench.timeit(f, warmup=5, repeat=repeat, inputs=inputs, device=device)
                prof = profile_launches(f, *inputs[0]) if device == "cuda" else {}
        rows.append({"name": f"decode {mode}", "mode": mode, "max_abs_err": err, "ref_max_abs": scale,
                     "correct": err <= 0.05 * scale, "first_call_s": first_s,
                     "compile_s": max(first_s - timing.median_s, 0.0), "steady_s": timing.median_s,
                     "spread": timing.spread, "cudagraph_skips": _skips() - skips0, **prof})
    return rows, graphs


def measure_train(modes: list[str], device: str, spec: dict, batch: int, repeat: int,
                  cache_root: str | None = None) -> tuple[list[dict], dict]:
    """Per mode: first-step loss against eager, compile and steady step time, launches."""
    spec = dict(spec)
    preset = spec.pop("preset")
    rows, ref_loss, graphs = [], None, {}
    for mode in bench.progress(modes, desc="training modes"):
        if mode in GPU_MODES and device != "cuda":
            rows.append({"name": f"train {mode}", "mode": mode, "skipped": "needs a CUDA GPU"})
            continue
        torch._dynamo.reset()
        model, opt, data = train_setup(preset, device=device, batch=batch, steps=repeat + 7, **spec)
        step = make_train_step(model, opt, device_type=device)
        if not graphs:
            graphs = graph_report(step.loss_eager, data[0])
            torch._dynamo.reset()
        clear_autotune_memory()   # a cold autotune per mode, like the empty cache folder
        skips0 = _skips()
        with fresh_caches(cache_root), _autotune_limits(mode), autotune_choices() as choices:
            step = make_train_step(model, opt, compile_with_mode(step.loss_eager, mode), device_type=device)
            _sync(device)
            t0 = time.perf_counter()
            loss0 = float(step(data[0]))
            _sync(device)
            first_s = time.perf_counter() - t0
            # Warm-up steps let compile workers and autotuning settle before the clock runs.
            timing = bench.timeit(step, warmup=5, repeat=repeat, inputs=[(d,) for d in data[1:]], device=device)
            prof = profile_launches(step, data[1], calls=3) if device == "cuda" else {}
        ref_loss = loss0 if ref_loss is None else ref_loss
        rows.append({"name": f"train {mode}", "mode": mode, "first_loss": loss0,
                     "correct": abs(loss0 - ref_loss) <= 2e-2 * abs(ref_loss), "first_call_s": first_s,
                     "compile_s": max(first_s - timing.median_s, 0.0), "steady_s": timing.median_s,
                     "spread": timing.spread, **prof})
        rows[-1]["cudagraph_skips"] = _skips() - skips0
        if "max-autotune" in mode:
            rows[-1]["autotune_choices"] = list(choices)
            rows[-1]["autotune_summary"] = summarise_choices(choices)
        del model, opt, data, step
        if device == "cuda":
            torch.cuda.empty_cache()
    return rows, graphs


@bench.topic("compile", help="torch.compile modes: decode step, training step, compile times")
def run(params: dict) -> dict:
    device = params.get("device") or default_device()
    decode_modes = [check_mode(m) for m in params.get("decode_modes", DECODE_MODES)]
    train_modes = [check_mode(m) for m in params.get("train_modes", TRAIN_MODES)]
    small = params.get("size") in ("smoke", "cpu") or device != "cuda"
    dspec = dict(preset="smoke") if small else dict(DECODE_MODEL)
    tspec = dict(preset="smoke") if small else dict(TRAIN_MODEL)
    batch = int(params.get("batch", 2 if small else 8))
    repeat = int(params.get("repeat", 5 if small else 50))

    # Every mode compiles into its own empty cache folder under one temporary root.
    with tempfile.TemporaryDirectory(prefix="course_kit_bench_compile_") as root:
        t0 = time.perf_counter()
        d_rows, d_graphs = measure_decode(decode_modes, device, dspec, repeat, root, params.get("dtype"))
        t1 = time.perf_counter()
        # Training steps are ~10 ms: 25 timed steps cost well under a second and steady the median.
        t_rows, t_graphs = measure_train(train_modes, device, tspec, batch, max(repeat // 2, 3), root)
        t2 = time.perf_counter()

    def by_mode(rows: list[dict]) -> dict:
        return {r["mode"]: r for r in rows if "steady_s" in r}

    dm, tm = by_mode(d_rows), by_mode(t_rows)
    for rows, m in ((d_rows, dm), (t_rows, tm)):
        for r in rows:
            if "steady_s" in r and "eager" in m:
                r["speedup_vs_eager"] = m["eager"]["steady_s"] / r["steady_s"]
    ro = dm.get("reduce-overhead", {}).get("speedup_vs_eager")
    ma_modes = [k for k in ("max-autotune", "max-autotune-no-cudagraphs") if k in tm]
    ma = max([tm[k]["speedup_vs_eager"] for k in ma_modes] or [0.0])
    # The record explains its training-step figure from its own profile (notebook 03 shows it).
    why = explain_train(tm, max(ma_modes, key=lambda k: tm[k]["speedup_vs_eager"])) if ma_modes else None
    summary = {
        "checks_passed": all(r.get("correct", True) for r in d_rows + t_rows),
        "decode_speedup": {k: v["speedup_vs_eager"] for k, v in dm.items()},
        "train_speedup": {k: v["speedup_vs_eager"] for k, v in tm.items()},
        "decode_compile_s": {k: v["compile_s"] for k, v in dm.items()},
        "train_compile_s": {k: v["compile_s"] for k, v in tm.items()},
        "decode_graphs": d_graphs, "train_graphs": t_graphs,
        "targets": {"reduce-overhead decode >= 3x eager": (ro or 0) >= 3.0,
                    "max-autotune training step >= 1.2x eager": ma >= 1.2},
        "decode_seconds": t1 - t0, "train_seconds": t2 - t1,
        "explain": why["text"] if why else "no max-autotune mode was measured",
        "explain_kernel_deltas": why["kernel_deltas"] if why else [],
        "compile_note": "each mode compiled with empty Inductor/Triton cache folders; compile_s = first call "
                        "minus one steady call (it includes CUDA-graph recording and autotuning)",
    }
    return {"params": {"decode_model": dspec, "train_model": tspec, "batch": batch, "repeat": repeat,
                       "decode_modes": decode_modes, "train_modes": train_modes, "device": device},
            "results": d_rows + t_rows, "summary": summary}
