"""What `max-autotune` chose: the candidates Inductor benchmarked per matmul, and the winner.

Inductor's algorithm selector calls registered "feedback savers" with its benchmark timings each
time it autotunes an op (torch._inductor.select_algorithm.add_feedback_saver). `autotune_choices()`
collects them as plain rows during a compile; `course-kit bench compile` stores them in its
max-autotune rows, and notebook 03 shows them (`explain_choices`). On a CPU, Inductor autotunes
nothing for the course's small workloads, so these rows come from the GPU record.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator



def _shape(node: Any) -> list:
    try:
        return [int(s) if str(s).isdigit() else str(s) for s in node.get_size()]
    except Exception:  # noqa: BLE001 - a node without a static size: keep its text
        return [str(node)]


def _backend(choice: Any) -> str:
    """'cuBLAS/ATen' for extern kernels, 'Triton template' for generated ones, else the class name."""
    name = f"{type(choice).__name__} {getattr(choice, 'name', '')}".lower()
    if "extern" in name or "aten" in name:
        return "ATen (cuBLAS)"
    if "triton" in name:
        return "Triton template"
    return type(choice).__name__


def choice_row(timings: dict, name: str, input_nodes: list) -> dict:
    """One autotuned op as plain data: its inputs' shapes, how many candidates, the winner, its
    backend and config, its time and the best time of the other backend."""
    if not timings:
        return {"op": name, "inputs": [_shape(n) for n in input_nodes], "candidates": 0}
    ranked = sorted(timings.items(), key=lambda kv: kv[1])
    best, best_ms = ranked[0]
    backend = _backend(best)
    other = next(((c, t) for c, t in ranked if _backend(c) != backend), None)
    return {"op": name, "inputs": [_shape(n) for n in input_nodes], "candidates": len(timings),
            "winner": getattr(best, "name", str(best)), "backend": backend,
            "config": str(getattr(best, "description", ""))[:300], "winner_ms": float(best_ms),
            "runner_up_backend": _backend(other[0]) if other else None,
            "runner_up_ms": float(other[1]) if other else None}


@contextlib.contextmanager
def autotune_choices() -> Iterator[list[dict]]:
    """Collect a `choice_row` for every op Inductor autotunes inside the block (empty where this torch
    has no feedback hook, or nothing was autotuned)."""
    rows: list[dict] = []
    try:
        from torch._inductor import select_algorithm as sa
    except ImportError:  # pragma: no cover - Inductor ships with torch 2
        yield rows
        return
    if not hasattr(sa, "add_feedback_saver"):
        yield rows
        return

    def saver(timings, name, input_nodes, *rest):   # the hook's arguments vary across torch versions
        rows.append(choice_row(dict(timings), str(name), list(input_nodes)))

    sa.add_feedback_saver(saver)
    try:
        yield rows
    finally:
        cache = sa.get_algorithm_selector_cache() if hasattr(sa, "get_algorithm_selector_cache") else None
        fns = getattr(cache, "feedback_saver_fns", None)
        if fns is not None and saver in fns:
            fns.remove(saver)


def clear_autotune_memory() -> None:
    """Forget in-process autotuning results, so the next max-autotune compile benchmarks again (an
    empty on-disk cache folder alone does not clear them)."""
    from torch._inductor import utils
    clear = getattr(utils, "clear_caches", None) or getattr(utils, "clear_inductor_caches", None)
    if clear is not None:
        clear()


def summarise_choices(rows: list[dict]) -> dict:
    """How many ops were autotuned, how many candidates in all, and which backend won how often."""
    tuned = [r for r in rows if r.get("candidates")]
    wins: dict[str, int] = {}
    for r in tuned:
        wins[r["backend"]] = wins.get(r["backend"], 0) + 1
    return {"ops": len(tuned), "candidates": sum(r["candidates"] for r in tuned), "wins": wins}


def explain_choices(rows: list[dict], mode: str = "max-autotune", limit: int = 5) -> str:
    """Markdown: what autotuning benchmarked and chose, per op (the slowest-to-run winners first)."""
    s = summarise_choices(rows)
    if not s["ops"]:
        return f"`{mode}` recorded no autotuning choices (this torch has no feedback hook, or no op was tuned)."
    text = (f"`{mode}` autotuned **{s['ops']} matmul-like ops**, benchmarking {s['candidates']} candidates in all; "
            f"winners: " + ", ".join(f"{k} {v}" for k, v in sorted(s["wins"].items(), key=lambda kv: -kv[1])) + ".")
    lines = ["| op | inputs | candidates | winner | its time (ms) | best of the other backend (ms) |",
             "|---|---|---|---|---|---|"]
    for r in sorted((r for r in rows if r.get("candidates")), key=lambda r: -r["winner_ms"])[:limit]:
        other = f"{r['runner_up_ms']:.4f} ({r['runner_up_backend']})" if r.get("runner_up_ms") is not None else "—"
        win = f"{r['backend']}: `{r['winner'][:40]}`" + (f" {r['config'][:80]}" if r.get("config") else "")
        lines.append(f"| {r['op']} | {' x '.join(str(i) for i in r['inputs'])} | {r['candidates']} | {win} | "
                     f"{r['winner_ms']:.4f} | {other} |")
    return text + "\n\n" + "\n".join(lines)


def probe(device: str = "cpu", n: int = 256) -> dict:
    """Compile one n x n matmul + bias + GELU with `max-autotune-no-cudagraphs` on `device`, from
    empty caches, and collect what Inductor benchmarked: {"device", "n", "compile_s", "rows", "error"}.
    Notebook 03 runs it on a CPU, where the recorded choices come from the GPU."""
    import time

    import torch

    from .modes import fresh_caches

    g = torch.Generator().manual_seed(0)
    x, w, b = (torch.randn(*s, generator=g).to(device) for s in ((n, n), (n, n), (n,)))

    def mm_gelu(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x @ w + b)

    torch._dynamo.reset()
    clear_autotune_memory()
    out = {"device": str(device), "n": n, "rows": [], "error": None}
    try:
        with fresh_caches(), autotune_choices() as rows:
            t0 = time.perf_counter()
            torch.compile(mm_gelu, mode="max-autotune-no-cudagraphs")(x, w, b)
            out["compile_s"] = time.perf_counter() - t0
        out["rows"] = list(rows)
    except Exception as err:  # noqa: BLE001 - what Inductor refused is the finding
        out["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
    finally:
        torch._dynamo.reset()
    return out


def explain_probe(p: dict) -> str:
    """What the probe shows: autotuning ran on this device (with what), or not, and why the choices
    shown next come from the record."""
    where = f"On this {'GPU' if p['device'] == 'cuda' else 'CPU'}, `max-autotune-no-cudagraphs` on a {p['n']} x {p['n']} matmul + bias + GELU"
    if p.get("error"):
        return f"{where} failed to compile: `{p['error']}`. The autotuning choices below are the reference GPU's."
    s = summarise_choices(p["rows"])
    if not s["ops"]:
        return (f"{where} compiled in {p['compile_s']:.1f} s and benchmarked **no** candidate: Inductor autotuned "
                f"nothing here (this run does not show why), so the choices below are the reference GPU's.")
    return (f"{where} compiled in {p['compile_s']:.1f} s and autotuned **{s['ops']}** op(s), benchmarking "
            f"{s['candidates']} candidates: " + explain_choices(p["rows"], "max-autotune-no-cudagraphs"))
