"""The README's benchmarks table, rendered from the records: the one place engineering targets are read.

Learner text never speaks of targets (DESIGN.md); the targets of the course's benchmarks live in
this table's rows, the records and the tests. Each row names a record (`data/reference/<slug>/<topic>.json`),
how to read its headline figure, the peer it is measured against and the target. The README holds the
rendered table between two markers, and a test checks that it is up to date:

    python -m course_kit.benchtable            # print the table
    python -m course_kit.benchtable --write    # rewrite the README's section
"""
from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from . import reference

BEGIN, END = "<!-- benchmarks:begin -->", "<!-- benchmarks:end -->"
README = Path(__file__).resolve().parents[1] / "README.md"


@dataclass(frozen=True)
class Row:
    slug: str
    topic: str
    what: str                         # the figure, in words
    read: Callable[[dict], float | None]
    unit: str                         # "x" for ratios, or a unit
    target: float | None = None       # at least this (None: reported only)
    at_most: bool = False             # the target is an upper bound


def _key(name: str) -> Callable[[dict], float | None]:
    return lambda rec: (rec.get("summary") or {}).get(name)


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


ROWS: tuple[Row, ...] = (
    Row("h200", "roofline", "device copy bandwidth (read + write)", _key("copy_gbs"), "GB/s"),
    Row("h200", "dtypes", "bf16 matmul, 8192³", _key("bf16_tflops"), "TFLOP/s"),
    Row("h200", "dtypes", "fp8 (fast accumulation) over bf16 matmul", _key("fp8_fast_over_bf16"), "x"),
    Row("h200", "amp", "bf16 autocast training step over strict fp32", _key("bf16_speedup_vs_fp32"), "x", 2.5),
    Row("h200", "amp", "fp16 + GradScaler: steps skipped after warm-up", _key("fp16_scaler_skipped_after_warmup"),
        "fraction", 0.01, at_most=True),
    Row("h200", "compile", "reduce-overhead decode step over eager",
        lambda r: (r.get("summary", {}).get("decode_speedup") or {}).get("reduce-overhead"), "x", 3.0),
    Row("h200", "cuda_graphs", "graph replay over eager launches (launch ratio)", _key("launch_ratio"), "x", 5.0),
    Row("h200", "cuda_graphs", "decode graph runner over HF generate, batch 1", _key("runner_vs_hf_generate"), "x", 20.0),
    Row("h200", "cuda_graphs", "llama-1b batch-1 decode: fraction of copy bandwidth", _key("hbm_fraction"),
        "fraction", 0.73),
    Row("h200", "cuda_graphs", "llama-1b batch-1 decode: time per token", _key("big_ms_per_token"), "ms", 0.80,
        at_most=True),
    Row("h200", "cuda_graphs", "smollm-135m batch-1 decode, best runner", _key("runner_tokens_per_s_b1"), "tokens/s",
        2000.0),
    Row("h200", "model", "course decode step over HF's, llama-1b", _key("llama-1b_speedup_vs_hf"), "x"),
    Row("h200", "batching", "continuous over static batching", _key("continuous_vs_static"), "x", 1.6),
    Row("h200", "batching", "engine over HF generate_batch", _key("engine_vs_hf_generate_batch"), "x", 10.0),
    Row("h200", "capstone", "capstone workload: engine over HF generate_batch", _key("engine_vs_HF_generate_batch"), "x"),
    # GPU idle only from the profiler (kernel and copy intervals; DESIGN.md): records made before it are
    # shown as not recorded, since their step-bracket figure was the host's picture
    Row("h200", "async", "GPU idle (profiler), sync loop, headline case", _key("sync_gpu_idle"), "fraction"),
    Row("h200", "async", "GPU idle (profiler), async loop, headline case", _key("async_gpu_idle"), "fraction"),
    Row("h200", "async", "… of which between steps (host-bound), async loop", _key("async_gpu_idle_between_steps"),
        "fraction"),
    Row("h200", "async", "… of which within steps (gaps between kernels), async loop",
        _key("async_gpu_idle_within_steps"), "fraction"),
    Row("h200", "async", "profiler overhead of the async loop's profiled pass", _key("async_profiler_overhead"),
        "fraction"),
    Row("h200", "capstone", "GPU idle (profiler), full engine, capstone workload",
        lambda r: next((x.get("gpu_idle_fraction") for x in r.get("results", [])
                        if x.get("name") == (r.get("summary") or {}).get("full_engine")), None), "fraction"),
    Row("h200", "engine", "engine, long mixed workload (smollm-135m, 256 requests of 100-1024 + 100-1024): output tokens/s",
        _key("best_tokens_per_s"), "tokens/s"),
    Row("h200", "engine", "… as a fraction of its step trace's bandwidth limit, best slot count",
        _key("best_fraction_of_limit"), "fraction", 0.5),
    Row("h200", "speculative", "speculative decoding, best k, over the target alone (batch 1, trained pair)",
        _key("speedup_vs_target"), "x", 1.8),
    Row("h200", "speculative", "speculative decoding over HF assisted generation, same pair", _key("vs_hf_assisted"),
        "x", 1.0),
    Row("h200", "speculative", "speculative decoding: acceptance rate alpha at the best k", _key("alpha_best_k"),
        "fraction"),
    Row("h200", "attention", "Triton flash forward over SDPA flash (B4 H16 S4096 D128, causal)",
        _key("triton_over_flash"), "x", 1.0),
    Row("h200", "attention", "Triton flash forward over cuDNN attention", _key("triton_over_cudnn"), "x", 0.95),
    Row("h200", "attention", "Triton flash forward + backward over SDPA flash", _key("fwd_bwd_triton_over_flash"),
        "x", 1.0),
    Row("h200", "attention", "Triton flash forward over SDPA flash, lowest across the sweep (GPU time)",
        lambda r: ((r.get("summary") or {}).get("sweep_min_over_flash_graph") or {}).get("ratio"), "x", 1.0),
    Row("h200", "attention", "the same, per call, host launch included",
        lambda r: ((r.get("summary") or {}).get("sweep_min_over_flash_per_call") or {}).get("ratio"), "x", 1.0),
    Row("h200", "woq", "llama-1b batch-1 decode, int8 weights over bf16 (Triton runners, same run)",
        _key("int8_vs_bf16_llama-1b"), "x", 1.6),
    Row("h200", "woq", "llama-1b batch-1 decode, int4 weights over bf16 (Triton runners, same run)",
        _key("int4_vs_bf16_llama-1b"), "x", 2.4),
    Row("h200", "woq", "fused int8 products at M = 1: fraction of copy bandwidth", _key("gemv_fraction_of_copy_int8"),
        "fraction", 0.70),
    Row("h200", "woq", "fused int4 products at M = 1: fraction of copy bandwidth", _key("gemv_fraction_of_copy_int4"),
        "fraction", 0.70),
    Row("h200", "woq", "int8 greedy agreement with bf16, llama-1b, 256 positions", _key("int8_agreement_llama-1b"),
        "fraction", 0.95),
    Row("h200", "woq", "int4 greedy agreement with bf16, llama-1b, 256 positions", _key("int4_agreement_llama-1b"),
        "fraction"),
    Row("h200", "woq", "Llama-3-8B-shape batch-1 decode, int4 weights over bf16", _key("int4_vs_bf16_llama3-8b"), "x"),
    Row("h200x2", "parallel", "TP=2 MLP over one GPU", _key("mlp_speedup_tp2"), "x", 1.7),
    Row("h200x2", "parallel", "TP=2 llama-1b decode over one GPU", _key("decode_speedup_llama-1b_tp2"), "x", 1.2),
    Row("h200x2", "parallel", "TP=2 Llama-3-8B-shape decode over one GPU", _key("decode_speedup_llama3-8b_tp2"), "x", 1.5),
    Row("h200", "serving", "course server: request rate where p99 TTFT crosses 1 s",
        lambda r: ((r.get("summary", {}).get("servers") or {}).get("course") or {}).get("knee_rps"), "req/s"),
    Row("h200", "serving", "course server over transformers serve: saturation capacity",
        lambda r: _ratio(((r.get("summary", {}).get("servers") or {}).get("course") or {}).get("capacity_rps"),
                         ((r.get("summary", {}).get("servers") or {}).get("transformers serve") or {})
                         .get("capacity_rps")), "x"),
)


def _fmt(value: float, unit: str) -> str:
    if unit == "x":
        return f"{value:.2f}x"
    if unit == "fraction":
        return f"{value:.1%}"
    if unit == "ms":
        return f"{value:.3f} ms"
    return f"{value:,.1f} {unit}"


def status(row: Row, value: float | None) -> str:
    """'met' / 'not met' against the row's target, '' when it has none or nothing was recorded."""
    if value is None or row.target is None:
        return ""
    ok = value <= row.target if row.at_most else value >= row.target
    return "met" if ok else "not met"


def render(rows: tuple[Row, ...] = ROWS) -> str:
    """The markdown table: figure, recorded value, target and status, record and its date."""
    lines = ["| figure | recorded | target | status | record |", "|---|---|---|---|---|"]
    for row in rows:
        path = reference.root() / row.slug / f"{row.topic}.json"
        rec = json.loads(path.read_text()) if path.is_file() else None
        value = row.read(rec) if rec else None
        value = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
        shown = _fmt(value, row.unit) if value is not None else "not recorded"
        target = "" if row.target is None else ("≤ " if row.at_most else "≥ ") + _fmt(row.target, row.unit)
        date = str(((rec or {}).get("environment") or {}).get("date", ""))[:10]
        lines.append(f"| {row.what} | {shown} | {target} | {status(row, value)} | "
                     f"`{row.slug}/{row.topic}.json`{' ' + date if date else ''} |")
    return "\n".join(lines)


def section(text: str) -> str:
    """The README text between the markers (exclusive)."""
    if BEGIN not in text or END not in text:
        raise ValueError(f"README has no {BEGIN} ... {END} section")
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n")


def write(readme: Path = README) -> bool:
    """Rewrite the README's table; True when it changed."""
    text = readme.read_text()
    section(text)                                          # the markers exist
    head, rest = text.split(BEGIN, 1)
    new = f"{head}{BEGIN}\n{render()}\n{END}{rest.split(END, 1)[1]}"
    if new != text:
        readme.write_text(new)
    return new != text


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="rewrite README.md's benchmarks section")
    args = ap.parse_args(argv)
    if args.write:
        print("README.md updated" if write() else "README.md already up to date")
    else:
        print(render())


if __name__ == "__main__":
    main()
