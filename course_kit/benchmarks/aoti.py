"""`course-kit bench aoti`: the course model's decode step through AOTInductor (notebook 04, §6).

Per device (the GPU first when there is one, then the CPU of the same machine):
1. export the TinyGPT decode step and check the exported program against eager;
2. compile it ahead of time into a .pt2 package (timed; no cache: the compile is the figure);
3. three fresh processes, each timed from its start: the package (import torch, load, first call),
   `torch.compile` with an empty Inductor cache (import, build the model, first call = compile)
   and eager (import, build, first call); each then times its steady-state decode step, and its
   logits are checked against eager in this process.
And once: a capture-gallery trap sent down the AOTI path, with its error.
Budget: about 80 s on an H200 host (`params["budget_s"]`, default 85: the CPU phase's compiling
steps are skipped, and say so, once it is spent).
"""
from __future__ import annotations

import tempfile
import time

import torch

from .. import bench, device as _device
from ..capture import aoti
from ..models.tiny_gpt import TinyGPT

# the decode step measured: launch-bound at batch 1, where a package's C++ wrapper should show
_PRESET = {"cuda": {"smoke": "smoke", "cpu": "cpu"}, "cpu": {"smoke": "smoke"}}
_DEFAULT = {"cuda": "small_gpu", "cpu": "cpu"}
TOLERANCE = 1e-3       # |logits - eager| / max |eager logits|: Inductor reorders reductions


def _say(text: str) -> None:
    print(f"[aoti] {text}", flush=True)


def _rel(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).abs().max() / want.abs().max())


def device_phase(dev: str, preset: str, steps: int, repeat: int, deadline: float, errors: dict) -> dict:
    """Export, compile, and the three cold starts on one device; every step guarded."""
    row: dict = {"device": dev, "preset": preset, "cold": {}, "rel_diff": {}}
    model = TinyGPT.from_preset(preset, seed=0, device=dev).eval()
    want = aoti.eager_logits(model, steps)
    try:
        _say(f"{dev}: export ({preset})")
        ep, row["export_s"] = aoti.export_decode(model)
        row["rel_diff"]["export"] = aoti.check_export(model, ep, steps) / float(want.abs().max())
    except Exception as err:  # noqa: BLE001 - recorded; nothing later can run without the export
        errors[f"{dev}_export"] = bench_error(err)
        return row
    with tempfile.TemporaryDirectory(prefix="aoti-bench-") as tmp:
        package = None
        if time.perf_counter() < deadline:
            try:
                _say(f"{dev}: aoti_compile_and_package")
                pk = aoti.compile_package(ep, tmp, use_cache=False)
                row.update(compile_s=pk["seconds"], package_bytes=pk["bytes"], cuda_build=pk["cuda_build"])
                package = pk["path"]
            except Exception as err:  # noqa: BLE001
                errors[f"{dev}_compile"] = bench_error(err)
        else:
            errors[f"{dev}_compile"] = "skipped: time budget spent"
        for mode in ("aoti", "compile", "eager"):
            if mode == "aoti" and package is None:
                continue
            if mode != "eager" and time.perf_counter() > deadline:
                errors[f"{dev}_cold_{mode}"] = "skipped: time budget spent"
                continue
            try:
                _say(f"{dev}: cold start, {mode}, in a fresh process")
                # a child that hangs is killed once the budget (plus a minute) is gone, and recorded
                left = max(60.0, deadline - time.perf_counter() + 60.0)
                r = aoti.cold_start(mode, preset=preset, device=dev, package=package, steps=steps, repeat=repeat,
                                    timeout_s=left)
                row["rel_diff"][mode] = _rel(r.pop("logits"), want)
                row["cold"][mode] = r
            except Exception as err:  # noqa: BLE001
                errors[f"{dev}_cold_{mode}"] = bench_error(err)
    return row


def bench_error(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[-1][:300] if text else ''}"


def summarize(rows: list[dict], refusal: dict | None) -> dict:
    s: dict = {"tolerance": TOLERANCE, "refusal": refusal}
    ok = True
    for r in rows:
        cold, d = r.get("cold", {}), r["device"]
        ok = ok and all(v <= TOLERANCE for v in r.get("rel_diff", {}).values())
        if "aoti" in cold and "compile" in cold:
            s[f"{d}_cold_start_speedup_vs_compile"] = cold["compile"]["cold_start_s"] / cold["aoti"]["cold_start_s"]
        for peer in ("eager", "compile"):
            if "aoti" in cold and peer in cold:
                s[f"{d}_steady_speedup_vs_{peer}"] = cold[peer]["steady_s"] / cold["aoti"]["steady_s"]
    s["checks_passed"] = ok and bool(rows)
    return s


@bench.topic("aoti", help="AOTInductor: export, compile to .pt2, cold start and steady state vs torch.compile")
def run(params: dict) -> dict:
    t0 = time.perf_counter()
    size = params.get("size", "full")
    deadline = t0 + float(params.get("budget_s", 85.0))
    steps, repeat = int(params.get("steps", 4)), int(params.get("repeat", 50 if size != "smoke" else 10))
    devices = ["cuda", "cpu"] if _device.has_cuda() else ["cpu"]
    errors: dict[str, str] = {}
    rows = []
    for dev in devices:
        preset = params.get("preset") or _PRESET[dev].get(size, _DEFAULT[dev])
        rows.append(device_phase(dev, preset, steps, repeat, deadline, errors))
    _say("the gallery's data-dependent branch down the AOTI path")
    refusal = None
    try:
        refusal = aoti.refusal("data-dependent branch")
    except Exception as err:  # noqa: BLE001
        errors["refusal"] = bench_error(err)
    _say(f"done in {time.perf_counter() - t0:.0f} s; errors: {sorted(errors) or 'none'}")
    return {"params": {"size": size, "steps": steps, "repeat": repeat, "devices": devices},
            "results": rows, "errors": errors, "summary": summarize(rows, refusal)}
