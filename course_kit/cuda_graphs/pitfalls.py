"""What goes wrong when a CUDA graph is captured (notebook 05, "Pitfalls"), each shown by running it.

`python -m course_kit.cuda_graphs.pitfalls` runs the demonstrations in a process of their own (a
broken capture must not poison the notebook's CUDA context) and prints JSON.
"""
from __future__ import annotations

import json
import random
import subprocess
import sys
from typing import Callable

import torch

from .runner import capture
from ..device import has_cuda

# ----------------------------------------------------------------------------- pitfalls

PITFALLS = [
    {"pitfall": "CPU sync inside capture",
     "what goes wrong": "`.item()`, `print(tensor)`, `if tensor:` wait for the GPU, which a stream "
                        "being captured cannot do: capture fails with a CUDA error.",
     "fix": "keep the step sync-free: decisions on the device (torch.where, masks), read results after replay"},
    {"pitfall": "dynamic shapes",
     "what goes wrong": "a graph replays fixed shapes and addresses; a new input tensor is silently "
                        "ignored and the output is computed from the old buffer.",
     "fix": "copy inputs into static buffers; capture one graph per batch size and pad to it"},
    {"pitfall": "allocation during capture",
     "what goes wrong": "tensors created inside the capture live in the graph's private pool and are "
                        "rewritten by every replay; an output kept from an earlier replay changes.",
     "fix": "copy (clone) outputs you keep; share one pool between graphs that never run at once"},
    {"pitfall": "RNG",
     "what goes wrong": "randomness drawn on the CPU (Python or torch CPU generators) runs once, at "
                        "capture: every replay reuses the same 'random' number.",
     "fix": "draw on the device (PyTorch advances the graph's Philox offset per replay) or pass noise "
            "in through a static buffer filled from a seeded generator before each replay"},
]


def _one_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0] if lines else ''}".strip()


def first_error(err: BaseException) -> tuple[str, str | None]:
    """(the first error of a chain, the one finally raised if it differs).

    A sync inside `torch.cuda.graph(...)` fails first with "operation not permitted when stream is
    capturing"; leaving the `with` block then ends the capture, which fails again ("operation failed
    due to a previous error during capture") and that second error is the one Python raises, with
    the first as its `__context__`. The first one is the lesson, so it is the one reported.
    """
    chain, seen = [err], {id(err)}
    while True:
        nxt = chain[-1].__cause__ or chain[-1].__context__
        if nxt is None or id(nxt) in seen:
            break
        chain.append(nxt)
        seen.add(id(nxt))
    first, last = _one_line(chain[-1]), _one_line(err)
    return first, (last if last != first else None)


def _try_capture(fn: Callable[[], object]) -> dict:
    """Capture fn; return {"error": first error, "then": the error raised at the end} ({} if it worked)."""
    try:
        capture(fn, warmup=0)
        return {"error": None}
    except Exception as err:  # noqa: BLE001 - the error is the demonstration
        try:
            torch.cuda.synchronize()
        except Exception:  # noqa: BLE001 - the context may stay broken; this process ends soon
            pass
        first, then = first_error(err)
        return {"error": first, **({"then, when the capture ends": then} if then else {})}


def _pitfall_cpu_sync() -> dict:
    x = torch.ones(4, device="cuda")

    def syncing():
        y = x * 2
        if y.sum().item() > 0:  # `.item()` waits for the GPU: a host sync
            y += 1
    return _try_capture(syncing)


def _pitfall_dynamic_shapes() -> dict:
    static_in = torch.ones(4, device="cuda")
    out: dict = {}
    g = capture(lambda: out.__setitem__("y", static_in * 2))
    keep_alive = static_in  # the graph still reads this buffer; it must not be freed
    static_in = torch.full((3,), 5.0, device="cuda")  # a new batch of 3: rebinding a Python name
    g.replay()
    torch.cuda.synchronize()
    del keep_alive
    return {"expected": (static_in * 2).tolist(), "found": out["y"].tolist(),
            "wrong": out["y"].shape != static_in.shape}


def _pitfall_allocation() -> dict:
    buf = torch.ones(4, device="cuda")
    res: dict = {}
    g = capture(lambda: res.__setitem__("y", buf * 10))  # y is allocated inside the capture
    g.replay()
    kept = res["y"]
    first = kept.tolist()
    buf.fill_(7.0)
    g.replay()
    torch.cuda.synchronize()
    return {"kept_after_replay_1": first, "same_tensor_after_replay_2": kept.tolist(),
            "wrong": kept.tolist() != first}


def _pitfall_rng() -> dict:
    base = torch.zeros(4, device="cuda")
    cpu_out: dict = {}
    dev_out: dict = {}
    g_cpu = capture(lambda: cpu_out.__setitem__("y", base + random.random()), warmup=0)
    g_dev = capture(lambda: dev_out.__setitem__("y", base + torch.rand(4, device="cuda")), warmup=0)
    draws_cpu, draws_dev = [], []
    for _ in range(3):
        g_cpu.replay()
        g_dev.replay()
        draws_cpu.append(round(cpu_out["y"][0].item(), 6))
        draws_dev.append(round(dev_out["y"][0].item(), 6))
    return {"cpu_rng_replays": draws_cpu, "device_rng_replays": draws_dev,
            "wrong": len(set(draws_cpu)) == 1 and len(set(draws_dev)) == 3}


_DEMOS = {"CPU sync inside capture": _pitfall_cpu_sync, "dynamic shapes": _pitfall_dynamic_shapes,
          "allocation during capture": _pitfall_allocation, "RNG": _pitfall_rng}
# the failing capture runs last: whatever state it leaves cannot spoil the other demonstrations
_ORDER = ["dynamic shapes", "allocation during capture", "RNG", "CPU sync inside capture"]


def demonstrate_pitfalls() -> dict:
    found = {}
    for name in _ORDER:
        try:
            found[name] = _DEMOS[name]()
        except Exception as err:  # noqa: BLE001 - report and go on
            found[name] = {"demo_failed": f"{type(err).__name__}: {err}"[:300]}
    return found


def run_pitfalls(timeout_s: float = 180) -> list[dict]:
    """The pitfalls demonstrated on the GPU, in a fresh process (a failed capture can leave the
    CUDA context unusable, so never in the notebook's own); on a CPU, the explanations only."""
    if not has_cuda():
        return [dict(p) for p in PITFALLS]
    try:
        proc = subprocess.run([sys.executable, "-m", "course_kit.cuda_graphs.pitfalls", "--pitfalls"],
                              capture_output=True, text=True, timeout=timeout_s)
        lines = proc.stdout.strip().splitlines()
        found = json.loads(lines[-1]) if proc.returncode == 0 and lines else {}
        failed = None if found else (proc.stderr.strip().splitlines() or ["no output"])[-1]
    except Exception as err:  # noqa: BLE001 - report, do not stop the run
        found, failed = {}, repr(err)
    return [{**p, **found.get(p["pitfall"], {"demo_failed": failed})} for p in PITFALLS]


if __name__ == "__main__":
    print(json.dumps(demonstrate_pitfalls()))
