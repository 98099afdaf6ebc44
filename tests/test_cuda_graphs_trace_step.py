"""Notebook 05's computed sentences about the H200 records: the graph's lead by batch, what a recorded
profile is of, and why the kept trace's step differs from the cuda_graphs record's (numbers from
data/reference/h200/cuda_graphs.json and traces.json, and the executed copy of notebook 05)."""
from __future__ import annotations

import pytest

from course_kit.cuda_graphs import explain as E, trace_step as T
from course_kit.profiling import files


def _rows(preset, pairs):
    return [{"preset": preset, "variant": v, "batch": b, "ms_per_step": ms} for (v, b), ms in pairs.items()]


# the executed copy's run (cell 22: eager 42.50 ms, graph 3.111 ms at batch 1; 14.8x at batch 8) and the record
LIVE = _rows(None, {("eager", 1): 42.50, ("graph", 1): 3.111, ("eager", 8): 52.36, ("graph", 8): 3.538})
RECORD = _rows("smollm-135m", {("eager", 1): 21.1816, ("graph", 1): 3.0951, ("eager", 8): 21.3238,
                               ("graph", 8): 3.5373, ("fused_graph", 1): 1.1083})


def test_the_graphs_lead_moves_as_its_numbers_say_both_ways():
    """Cell 20 said "at larger batch ... the gap narrows" while this run's lead went 13.66x -> 14.80x."""
    live = E.explain_graph_lead(LIVE, 9.30, "This run")
    assert "the graph's lead grows (13.66x → 14.80x)" in live and "narrows" not in live
    assert "13.66x, is 1.47x larger than the launch ratio of section 1 (9.30x)" in live
    rec = E.explain_graph_lead(RECORD, 6.11, "Recorded", "smollm-135m")
    assert "the graph's lead shrinks (6.84x → 6.03x)" in rec
    assert "6.84x, is about the same as (within 15%) the launch ratio" in rec
    level = E.explain_graph_lead(_rows(None, {("eager", 1): 10.0, ("graph", 1): 1.0, ("eager", 4): 10.1,
                                              ("graph", 4): 1.0}), 20.0)
    assert "holds about level" in level and "2.00x smaller than the launch ratio" in level
    assert "needs a CUDA GPU" in E.explain_graph_lead(_rows(None, {("eager", 1): 10.0}), None)


SUMMARY = {"decode_bytes": {"preset": "smollm-135m"}, "hbm_variant": "triton_graph_pdl",
           "profile_fused_graph_b1": {"kernels_per_step": 432.0, "gpu_us_per_step": 946.6},
           "profile_big_b1": {"kernels_per_step": 104.0, "gpu_us_per_step": 1426.2}}
BIG = _rows("llama-1b", {("triton_graph", 1): 0.9664, ("triton_graph_pdl", 1): 0.7834})


def test_a_profile_whose_kernel_time_exceeds_its_step_says_it_is_the_pdl_one():
    """Cell 27 printed "`profile_big_b1`: 104 kernels, 1426 µs of GPU time per step" beside a 783 µs step."""
    big = E.describe_profile("profile_big_b1", SUMMARY, RECORD + BIG)
    assert "(llama-1b, `triton_graph_pdl`, batch 1)" in big
    assert "643 µs more than the 783 µs step itself" in big and "programmatic dependent launch" in big
    fused = E.describe_profile("profile_fused_graph_b1", SUMMARY, RECORD + BIG)
    assert "in a 1108 µs step (85% busy)" in fused and "programmatic" not in fused
    with pytest.raises(ValueError, match="profile_nope"):
        E.describe_profile("profile_nope", SUMMARY, RECORD)


# traces.json, lesson 05 (the H200 record): eager and graph at batch 1
TRACE_EAGER = {"name": "05-eager", "what": "smollm-135m decode step, batch 1, eager", "kernels_per_step": 1488,
               "copies": 170, "steps": 5, "step_us_median": 71684.34, "unprofiled_wall_s": 0.22527096,
               "profiler_overhead": 0.6924}
TRACE_GRAPH = {"name": "05-graph", "kernels_per_step": 1488, "copies": 170, "steps": 5, "step_us_median": 3174.72,
               "unprofiled_wall_s": 0.015577}
CG_SUMMARY = {"decode_bytes": {"preset": "smollm-135m"}, "profile_eager_b1": {"kernels_per_step": 732.0}}


def test_the_kept_trace_counts_what_a_hash_skipping_profile_keeps():
    kept = files.load("05-eager", slug="h200")
    if kept is None:
        pytest.skip("the H200's kept trace is not in this checkout")
    assert T.hash_free_per_step(kept) == 730          # + the bench's 2 input fills = the record's 732
    assert T.left_out_by_record(TRACE_EAGER, 732.0, kept) == 792
    assert T.left_out_by_record(TRACE_EAGER, 900.0, kept) is None     # another count: no cause claimed


def _trace(names):
    """A two-step GPU trace whose kernels carry `names` in each step."""
    evs = [{"ph": "X", "cat": "user_annotation", "name": "window", "ts": 0, "dur": 1000}]
    corr = 0
    for k in range(2):
        evs.append({"ph": "X", "cat": "user_annotation", "name": f"step {k}", "ts": 400 * k, "dur": 300})
        for i, name in enumerate(names):
            corr += 1
            t = 400 * k + 10 * i
            evs.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": t, "dur": 2,
                        "args": {"correlation": corr}})
            evs.append({"ph": "X", "cat": "kernel", "name": name, "ts": t + 5, "dur": 3,
                        "args": {"correlation": corr, "stream": 7}})
    return {"traceEvents": evs}


def test_the_trace_step_explainer_names_the_skipped_kernels_and_the_host():
    """Cell 36 said 1488 kernels and a 71.68 ms step; cells 22/25 said 732 kernels and 6.84x: say why."""
    kept = _trace(["gemv", "add", "elementwise_kernel<...>::{lambda(int)#1}", "copy {lambda()#3}"])
    row = dict(TRACE_EAGER, kernels_per_step=4, copies=0)
    text = T.explain_trace_step(row, TRACE_GRAPH, dict(CG_SUMMARY, profile_eager_b1={"kernels_per_step": 4.0}),
                                RECORD, kept)
    assert "Of the trace's 4, 2 have no `#`" in text and "it left out 2 of the step's kernels" in text
    assert "(fixed since; a new record counts them)" in text
    # a record made with complete counts is never explained by the old '#' filter
    lower = T.explain_trace_step(row, TRACE_GRAPH, dict(CG_SUMMARY, profile_eager_b1={
        "kernels_per_step": 4.0, "kernels_complete": "yes"}), RECORD, kept)
    assert "have no `#`" not in lower and "neither record shows where" in lower
    agree = T.explain_trace_step(row, TRACE_GRAPH, dict(CG_SUMMARY, profile_eager_b1={
        "kernels_per_step": 6.0, "kernels_complete": "yes"}), RECORD, kept)
    assert "The two counts agree" in agree
    real = T.explain_trace_step(TRACE_EAGER, TRACE_GRAPH, CG_SUMMARY, RECORD, None)
    assert "1488 kernels and 34 copies, 1522 in all" in real and "counted 732" in real
    # 1,522 against 732 - 2 fills: the same 792 the kept trace's '#' count names when it is there
    assert "the two differ by 792" in real and "left out" not in real          # no kept trace: no cause claimed
    assert "71.68 ms is an eager step's span under the profiler" in real and "69% longer" in real
    assert "eager step took 45.05 ms, the cuda_graphs record's 21.18 ms: the trace bench's ran 2.13x slower" in real
    assert "graph step ran about as fast as (within 3%) the record's (3.115 ms against 3.095 ms)" in real
    assert "differ in the host's time per launch" in real
    assert "22.58x from the profiled spans, 14.46x unprofiled in the trace bench, and 6.84x" in real
    fixed = T.explain_trace_step(TRACE_EAGER, TRACE_GRAPH, dict(CG_SUMMARY, profile_eager_b1={"kernels_per_step": 1524.0}),
                                 RECORD, None)
    assert "The two counts agree" in fixed
    slow_gpu = T.explain_trace_step(TRACE_EAGER, dict(TRACE_GRAPH, unprofiled_wall_s=0.03), CG_SUMMARY, RECORD, None)
    assert "on the GPU's side as well" in slow_gpu and "host's time per launch" not in slow_gpu
    with pytest.raises(ValueError, match="05-eager"):
        T.explain_trace_step(dict(TRACE_EAGER, kernels_per_step=None), None, CG_SUMMARY, RECORD)
