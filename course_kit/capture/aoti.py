"""AOTInductor: a captured graph that ships (notebook 04, §6).

What capture is *for*: `torch.export` gives a graph with the Python taken out; AOTInductor
(`torch._inductor.aoti_compile_and_package`) compiles that graph ahead of time, with Inductor's
kernels (C++ on a CPU, Triton on a GPU) and a C++ wrapper that calls them, into one `.pt2` file
holding a shared library and the weights. `torch._inductor.aoti_load_package` loads it in another
process (or from C++, with no Python at all) and runs it: no model code, no tracing, no compiling
at start-up.

The module exported is the course TinyGPT's batch-1 decode step (`DecodeStep`: one token in,
logits out, the static KV cache written in place). It exports whole: its shapes are static and it
never reads a tensor on the host (notebook 05 made it so for CUDA graphs), so nothing had to be
cut down to the MLP block. `cold_start` runs each peer in a fresh process (`aoti_cold.py`):
import, load or build, first call, then the steady-state call; `refusal` sends a capture-gallery
trap through the same path and keeps the error.

Compiling costs tens of seconds on a 2-core CPU (mostly g++ on the generated wrapper), so
`compile_package` keeps packages in a cache keyed by what they hold (the graph's code, the
weights, the device, torch's version): the same module compiles once per machine.
"""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .. import narrate
from ..models.tiny_gpt import TinyGPT, config
from .methods import first_line

COLD_SCRIPT = Path(__file__).with_name("aoti_cold.py")
ROOT = Path(__file__).resolve().parents[2]
MODES = ("eager", "compile", "aoti")


class DecodeStep(nn.Module):
    """TinyGPT's decode step as a module to export: (token [B], pos [1], cache) -> logits [B, vocab]."""

    def __init__(self, model: TinyGPT):
        super().__init__()
        self.model = model

    def forward(self, token: torch.Tensor, pos: torch.Tensor, cache: list[torch.Tensor]) -> torch.Tensor:
        return self.model.decode(token, pos, cache)


def token_at(i: int, vocab: int, batch: int = 1, device: Any = "cpu") -> torch.Tensor:
    """The i-th token of the fixed decode sequence every peer runs (aoti_cold.py uses the same rule)."""
    return torch.full((batch,), (7 * i + 3) % vocab, device=device)


def eager_logits(model: TinyGPT, steps: int, batch: int = 1) -> torch.Tensor:
    """Logits [steps, B, vocab] of `steps` eager decode steps from an empty cache: the oracle."""
    dev = model.tok.weight.device
    cache = model.new_cache(batch)
    out = [model.decode(token_at(i, model.cfg.vocab, batch, dev), torch.tensor([i], device=dev), cache)
           for i in range(steps)]
    return torch.stack(out).float().cpu()


def export_decode(model: TinyGPT, batch: int = 1) -> tuple[torch.export.ExportedProgram, float]:
    """torch.export of the decode step (static shapes), and the seconds it took."""
    dev = model.tok.weight.device
    args = (token_at(0, model.cfg.vocab, batch, dev), torch.tensor([0], device=dev), model.new_cache(batch))
    t0 = time.perf_counter()
    ep = torch.export.export(DecodeStep(model.eval()), args)
    return ep, time.perf_counter() - t0


def check_export(model: TinyGPT, ep: torch.export.ExportedProgram, steps: int = 4) -> float:
    """Largest |difference| between the exported program and eager over `steps` decode steps
    (the cache it writes in place included, through the logits of the later steps)."""
    dev = model.tok.weight.device
    cache = model.new_cache(1)
    fn = ep.module()
    got = torch.stack([fn(token_at(i, model.cfg.vocab, 1, dev), torch.tensor([i], device=dev), cache)
                       for i in range(steps)]).float().cpu()
    return float((got - eager_logits(model, steps)).abs().max())


def graph_summary(ep: torch.export.ExportedProgram) -> dict:
    """Operators in the exported graph (nested graphs included: `torch.no_grad` on decode becomes a
    wrapped subgraph), and how many of them write the KV cache in place."""
    targets = [str(n.target) for gm in ep.graph_module.modules() if isinstance(gm, torch.fx.GraphModule)
               for n in gm.graph.nodes if n.op == "call_function"
               and not str(n.target).startswith(("<built-in", "wrap_with"))]
    return {"ops": len(targets), "cache_writes": sum("index_copy_" in t for t in targets),
            "linears": sum("linear" in t for t in targets), "attention": sum("scaled_dot_product" in t for t in targets)}


def explain_export(summary: dict, seconds: float, max_diff: float, steps: int) -> str:
    """What export captured of the decode step, and whether it computes eager's numbers."""
    same = "equal to" if max_diff == 0.0 else f"within {max_diff:.1e} of"
    return (f"Export took {seconds:.1f} s. The graph holds {summary['ops']} ATen operators: {summary['linears']} "
            f"linears, {summary['attention']} attention calls and {summary['cache_writes']} in-place writes into the "
            f"KV cache (`index_copy_`, one for K and one for V per layer), so the cache update travels with the "
            f"graph. Over {steps} decode steps from an empty cache, its logits were {same} eager's: later steps "
            f"read what earlier ones wrote, so a lost write would have shown.")


def cache_dir() -> Path:
    """Where compiled packages are kept: $COURSE_KIT_AOTI_CACHE, else ~/.cache/course_kit/aoti."""
    env = os.environ.get("COURSE_KIT_AOTI_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "course_kit" / "aoti"


def package_key(ep: torch.export.ExportedProgram) -> str:
    """What a package holds, hashed: the graph's code, every weight's bytes, the device, torch."""
    h = hashlib.sha256(f"{torch.__version__}|{ep.graph_module.code}".encode())
    for name, t in sorted(ep.state_dict.items()):
        h.update(name.encode())
        h.update(f"{t.device}|{t.dtype}|{tuple(t.shape)}".encode())
        h.update(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:24]


def cached_package(ep: torch.export.ExportedProgram, folder: str | Path | None = None) -> str | None:
    """The path of an already compiled package of `ep`, or None (nothing is compiled)."""
    path = (Path(folder) if folder is not None else cache_dir()) / f"decode-{package_key(ep)}.pt2"
    return str(path) if path.is_file() else None


def compile_package(ep: torch.export.ExportedProgram, folder: str | Path | None = None,
                    use_cache: bool = True) -> dict:
    """AOT-compile `ep` into a .pt2 package (or reuse the cached one with the same key).
    Returns {"path", "seconds" (0 when cached), "bytes", "cached", "cuda_build" (what `aoti_cuda.prepare`
    did for a CUDA package, else None)}."""
    folder = Path(folder) if folder is not None else cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"decode-{package_key(ep)}.pt2"
    if use_cache and path.is_file():
        return {"path": str(path), "seconds": 0.0, "bytes": path.stat().st_size, "cached": True, "cuda_build": None}
    build = None
    if any(t.device.type == "cuda" for t in ep.state_dict.values()):
        from . import aoti_cuda
        build = aoti_cuda.prepare()          # CUDA headers and libcuda for the C++ wrapper's build
    t0 = time.perf_counter()
    tmp = path.with_suffix(f".{os.getpid()}.tmp.pt2")
    torch._inductor.aoti_compile_and_package(ep, package_path=str(tmp))
    tmp.replace(path)           # whole packages only: a killed compile leaves no half file behind
    return {"path": str(path), "seconds": time.perf_counter() - t0, "bytes": path.stat().st_size, "cached": False,
            "cuda_build": build}


def cold_start(mode: str, *, preset: str, device: str = "cpu", package: str | None = None, steps: int = 4,
               repeat: int = 20, seed: int = 0, batch: int = 1, fresh_inductor_cache: bool = True,
               threads: int | None = None, timeout_s: float = 600.0) -> dict:
    """Run one peer in a fresh Python process (`aoti_cold.py`): its phases' seconds, its steady-state
    call, and its logits over `steps` decode steps (key "logits", a tensor). `fresh_inductor_cache`
    gives torch.compile empty caches (TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR), so its first call
    compiles everything;
    `threads`: CPU threads of the child (None: torch's default), the same for every peer."""
    if mode not in MODES:
        raise ValueError(f"mode={mode!r}; choose one of {MODES}")
    if mode == "aoti" and not (package and Path(package).is_file()):
        raise ValueError(f"mode 'aoti' needs the path of a compiled .pt2 package, got {package!r}")
    cfg = config(preset)
    with tempfile.TemporaryDirectory(prefix="aoti-cold-") as tmp:
        args = {"mode": mode, "preset": preset, "device": device, "package": package, "steps": steps,
                "repeat": repeat, "seed": seed, "batch": batch, "root": str(ROOT), "vocab": cfg.vocab, "threads": threads,
                "layers": cfg.n_layers, "cache_shape": [2, batch, cfg.n_heads, cfg.seq_len, cfg.head_dim],
                "out": str(Path(tmp) / "logits.pt")}
        env = dict(os.environ)
        if fresh_inductor_cache:     # and Triton's own kernel cache, which Inductor's setting does not move
            env["TORCHINDUCTOR_CACHE_DIR"] = str(Path(tmp) / "inductor")
            env["TRITON_CACHE_DIR"] = str(Path(tmp) / "triton")
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, str(COLD_SCRIPT), json.dumps(args)], capture_output=True,
                              text=True, env=env, timeout=timeout_s)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"the {mode} cold start failed: {exit_reason(proc.returncode, proc.stderr)}")
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        result["logits"] = torch.load(args["out"], weights_only=True)
    result["process_s"] = wall
    return result


def exit_reason(code: int, stderr: str) -> str:
    """Why a child process ended badly: its exit code and last error line, or the signal that
    killed it (a negative code: a crash in native code, such as a loaded package, prints nothing)."""
    last = stderr.strip().splitlines()[-1] if stderr.strip() else ""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"the process was killed by {name}" + (f" ({last})" if last else ", with no error text")
    return f"exit {code}: {last or 'no error text'}"


def cold_starts(model: TinyGPT, modes: tuple[str, ...] = ("aoti", "compile", "eager"), steps: int = 4,
                **kwargs: Any) -> tuple[dict[str, dict], dict[str, str]]:
    """`cold_start` for each mode (same keyword arguments), each one's logits checked against
    `model`'s eager ones. Returns (rows by mode, why by mode for those whose process failed): a
    crashed peer is reported, never the end of the others. Wrong logits still raise."""
    want = eager_logits(model, steps)
    rows, failed = {}, {}
    for mode in modes:
        try:
            r = cold_start(mode, steps=steps, **kwargs)
        except (RuntimeError, subprocess.TimeoutExpired) as err:
            failed[mode] = str(err)
            continue
        diff = float((r.pop("logits") - want).abs().max())
        if diff > 1e-3 * float(want.abs().max()):
            raise AssertionError(f"the {mode} cold start's logits differ from eager's by {diff:.3g}")
        rows[mode] = r
    return rows, failed


def explain_failures(failed: dict[str, str], where: str) -> str:
    """One line per peer whose fresh process failed on `where`, saying where the figures come from."""
    return " ".join(f"**No {mode} cold start on {where}:** {why}." for mode, why in failed.items()) + (
        " The reference GPU's record below has the figures." if failed else "")


def refusal(trap: str = "data-dependent branch") -> dict:
    """Send one capture-gallery trap down AOTInductor's path (torch.export, then compile); where it
    stops and the error's first line. Only a trap export accepts would reach the compiler."""
    from .gallery import TRAPS, _quiet_torch_logs
    if trap not in TRAPS:
        raise ValueError(f"unknown trap {trap!r}; choose one of {list(TRAPS)}")
    make, example, _probe, _note = TRAPS[trap]
    try:
        with _quiet_torch_logs():
            torch.export.export(make().eval(), (example(),))
    except Exception as err:  # noqa: BLE001 - the refusal is the finding
        return {"trap": trap, "refused": True, "stage": "torch.export (AOTInductor's first step)",
                "error": first_line(err, 240)}
    return {"trap": trap, "refused": False, "stage": "exported; the compiler would take it as captured",
            "error": ""}


def explain_cold_start(rows: dict[str, dict], where: str) -> str:
    """Cold start (import + load or build + first call) and the steady-state call of each peer."""
    for m in ("compile", "aoti"):
        if m not in rows:
            raise ValueError(f"need the {m!r} cold start, got {sorted(rows)}")
    a, c = rows["aoti"], rows["compile"]
    text = (f"On {where}, a fresh process answered its first decode step after **{a['cold_start_s']:.2f} s** with the "
            f"AOTInductor package (import {a['import_s']:.2f} s, load {a['load_s']:.2f} s, first call "
            f"{a['first_call_s']:.3f} s) and after **{c['cold_start_s']:.2f} s** with `torch.compile` (import "
            f"{c['import_s']:.2f} s, build {c['load_s']:.2f} s, first call, which compiles, {c['first_call_s']:.2f} s): "
            f"the package started **{narrate.speed(a['cold_start_s'], c['cold_start_s'])}** torch.compile.")
    steady = [f"{m} {r['steady_s'] * 1e6:,.0f} µs" for m, r in rows.items()]
    text += " One steady-state decode step: " + ", ".join(steady) + "."
    against = ([f"{narrate.speed(a['steady_s'], rows['eager']['steady_s'])} eager"] if "eager" in rows else [])
    against.append(f"{narrate.speed(a['steady_s'], c['steady_s'])} the compiled step")
    return text + " The package ran " + " and ".join(against) + "."
