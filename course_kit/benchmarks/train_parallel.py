"""`course-kit bench train_parallel`: memory against time in training (notebook 09, §9).

On the device at hand: TinyGPT's fp32 AdamW step with and without a checkpoint per block (peak
memory, step time, the formula's bytes), and one batch in k = 1, 2, 4, 8 micro-batches. With two
GPUs or more: FSDP2 against DDP over NCCL, one GPU per rank (step time, peak memory, the bytes
each rank holds against ZeRO-3); with fewer, that part is recorded as pending. About 25 s on an
H200 at preset "full".
"""
from __future__ import annotations

import gc
import time

import torch

from .. import bench, device as _device
from ..parallel import accumulate, fsdp, launcher, recompute

_PRESET = {"smoke": ("smoke", 8), "cpu": ("cpu", 4), "small_gpu": ("small_gpu", 8), "full": ("full", 8)}


def _say(text: str) -> None:
    print(f"[train_parallel] {text}", flush=True)


def _guard(name: str, errors: dict, fn):
    try:
        return fn()
    except Exception as err:  # noqa: BLE001 - recorded; the next phase still runs
        text = str(err).strip().splitlines()
        errors[name] = f"{type(err).__name__}: {text[-1][:300] if text else ''}"
        _say(f"{name} failed: {errors[name]}")
        return None
    finally:
        gc.collect()
        if _device.has_cuda():
            torch.cuda.empty_cache()


@bench.topic("train_parallel", help="recomputation, gradient accumulation, and FSDP2 vs DDP on 2+ GPUs")
def run(params: dict) -> dict:
    t0 = time.perf_counter()
    dev = params.get("device") or "cpu"
    preset, batch = _PRESET.get(params.get("size", "full"), _PRESET["full"])
    batch = int(params.get("batch", batch))
    errors: dict[str, str] = {}
    out: dict = {"params": {"preset": preset, "batch": batch, "device": dev}}
    _say(f"recomputation on {dev} ({preset}, batch {batch})")
    out["recompute"] = {k: _guard(f"recompute_{k}", errors,
                                  lambda k=k: recompute.measure(preset, batch, recompute=k == "with", device=dev))
                        for k in ("without", "with")}
    _say("gradient accumulation, k = 1, 2, 4, 8")
    micros = tuple(k for k in (1, 2, 4, 8) if batch % k == 0)
    out["accumulation"] = _guard("accumulation", errors, lambda: accumulate.cost(preset, batch, micros, device=dev))
    out["accumulation_check"] = _guard("accumulation_check", errors,
                                       lambda: accumulate.check_accumulation("smoke", 8, 4))
    gpus = torch.cuda.device_count() if _device.has_cuda() else 0
    if gpus >= 2:
        _say(f"FSDP2 against DDP over NCCL on 2 of {gpus} GPUs")
        out["fsdp"] = _guard("fsdp", errors, lambda: launcher.launch(
            fsdp.measure_fsdp, 2, backend="nccl", reuse=False, preset="small_gpu" if preset == "full" else preset))
    else:
        out["fsdp"] = None
        errors["fsdp"] = fsdp.PENDING
    rc = out["recompute"]
    summary: dict = {"fsdp_pending": gpus < 2}
    if rc.get("without") and rc.get("with"):
        summary["recompute_peak_ratio"] = rc["with"]["peak_bytes"] / rc["without"]["peak_bytes"]
        summary["recompute_time_ratio"] = rc["with"]["step_s"] / rc["without"]["step_s"]
    if out["fsdp"]:
        r0 = out["fsdp"][0]
        summary["fsdp_step_vs_ddp"] = r0["fsdp"]["step_s"] / r0["dp"]["step_s"]
    out.update(errors=errors, summary=summary, results=out.get("accumulation") or [])
    _say(f"done in {time.perf_counter() - t0:.0f} s; errors: {sorted(errors) or 'none'}")
    return out
