"""What max-autotune chose: rows from Inductor's feedback hook, their summary and the notebook's table.
The hook itself is exercised on a GPU (bench compile); here it is fed the objects Inductor passes."""
from __future__ import annotations

from types import SimpleNamespace

from course_kit.compile_modes import autotune as A


class ExternKernelCaller(SimpleNamespace):
    __hash__ = object.__hash__     # Inductor's choice callers are hashable dict keys


class TritonTemplateCaller(SimpleNamespace):
    __hash__ = object.__hash__


class _Node:
    def __init__(self, *size):
        self.size = size

    def get_size(self):
        return list(self.size)


def _timings():
    return {ExternKernelCaller(name="extern_mm", description="cuBLAS"): 0.120,
            TritonTemplateCaller(name="triton_mm_3", description="BLOCK_M=128, BLOCK_N=64, num_warps=4"): 0.095,
            TritonTemplateCaller(name="triton_mm_4", description="BLOCK_M=64, BLOCK_N=64, num_warps=4"): 0.140}


def test_choice_row_names_winner_and_the_other_backend():
    r = A.choice_row(_timings(), "mm", [_Node(8192, 768), _Node(768, 3072)])
    assert r["winner"] == "triton_mm_3" and r["backend"] == "Triton template" and r["candidates"] == 3
    assert r["runner_up_backend"] == "ATen (cuBLAS)" and r["runner_up_ms"] == 0.120
    assert r["inputs"] == [[8192, 768], [768, 3072]] and "BLOCK_M=128" in r["config"]
    assert A.choice_row({}, "mm", [])["candidates"] == 0


def test_summary_and_explanation():
    rows = [A.choice_row(_timings(), "mm", [_Node(8, 8), _Node(8, 8)]),
            A.choice_row({ExternKernelCaller(name="extern_mm"): 0.2}, "addmm", [_Node(8, 8)])]
    s = A.summarise_choices(rows)
    assert s == {"ops": 2, "candidates": 4, "wins": {"Triton template": 1, "ATen (cuBLAS)": 1}}
    t = A.explain_choices(rows)
    assert "2 matmul-like ops" in t and "| addmm |" in t and "0.1200 (ATen (cuBLAS))" in t
    assert "no autotuning choices" in A.explain_choices([])


def test_hook_registers_and_unregisters():
    from torch._inductor import select_algorithm as sa
    if not hasattr(sa, "add_feedback_saver"):
        return
    fns = sa.get_algorithm_selector_cache().feedback_saver_fns
    n = len(fns)
    with A.autotune_choices() as rows:
        assert len(fns) == n + 1
        fns[-1](_timings(), "mm", [_Node(4, 4)], [], lambda: {})
    assert len(fns) == n and rows[0]["winner"] == "triton_mm_3"
    A.clear_autotune_memory()


def test_probe_on_this_cpu_reports_what_inductor_benchmarked():
    from course_kit.compile_modes import autotune
    p = autotune.probe("cpu", 64)
    assert p["device"] == "cpu" and p["error"] is None and p["compile_s"] > 0
    text = autotune.explain_probe(p)
    assert text.startswith("On this CPU, `max-autotune-no-cudagraphs` on a 64 x 64 matmul")   # the device named
    assert ("benchmarked **no** candidate" in text) == (not p["rows"])


def test_explain_probe_both_ways_and_on_failure():
    from course_kit.compile_modes import autotune
    base = {"device": "cuda", "n": 256, "compile_s": 12.0, "error": None}
    none = autotune.explain_probe({**base, "rows": []})
    assert "**no** candidate" in none and "does not show why" in none and "reference GPU's" in none
    row = autotune.choice_row({}, "mm", [])   # an op with no timings counts as not tuned
    assert "**no** candidate" in autotune.explain_probe({**base, "rows": [row]})
    tuned = {"op": "mm", "inputs": [[256, 256], [256, 256]], "candidates": 12, "winner": "triton_mm_3",
             "backend": "Triton template", "config": "BLOCK_M=64", "winner_ms": 0.01,
             "runner_up_backend": "ATen (cuBLAS)", "runner_up_ms": 0.012}
    some = autotune.explain_probe({**base, "rows": [tuned]})
    assert "autotuned **1** op(s), benchmarking 12 candidates" in some and "triton_mm_3" in some
    failed = autotune.explain_probe({**base, "rows": [], "error": "RuntimeError: no compiler"})
    assert "failed to compile: `RuntimeError: no compiler`" in failed
