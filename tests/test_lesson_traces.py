"""`course-kit bench traces` on a CPU: every lesson's own code profiled, its trace kept small."""
from __future__ import annotations

import pytest

from course_kit import profiling
from course_kit.benchmarks import lesson_traces
from course_kit.profiling import files
from course_kit import benchmarks


def test_traces_topic_profiles_the_lessons_and_keeps_their_traces(tmp_path):
    rec = benchmarks.run_topic("traces", {"size": "smoke", "lessons": ["05", "07", "10"], "trace_dir": str(tmp_path),
                                     "progress": False})
    names = [r["name"] for r in rec["results"]]
    assert names == ["05-eager", "05-exercise", "07-sync", "07-async", "10-full"], rec["results"]
    for r in rec["results"]:
        assert r["method"] == profiling.CPU_OP_METHOD and "gpu_idle_fraction" not in r   # a CPU: no GPU idle
        assert r["steps"] >= 1 and r["kernels_per_step"] > 0 and r["profiler_overhead"] is not None
        assert (tmp_path / r["trace_file"]).stat().st_size == r["trace_bytes"] < files.MAX_BYTES
        kept = files.load(r["name"], where=tmp_path)
        # a time window around 3 steps from the middle (an overlapping neighbour may show at an edge)
        assert profiling.summarize(kept)["steps"] <= min(5, r["steps"])
    assert set(rec["summary"]) == set(names) and "trace" not in rec["results"][0]


def test_unknown_lesson_and_size_are_refused():
    with pytest.raises(ValueError, match="lesson"):
        lesson_traces.profile_lesson("06", {"size": "smoke"})
    with pytest.raises(ValueError, match="size"):
        lesson_traces.profile_lesson("05", {"size": "huge"})


@pytest.mark.gpu
def test_gpu_traces_have_kernels_per_step_and_gpu_idle(tmp_path):
    rec = benchmarks.run_topic("traces", {"size": "small_gpu", "lessons": ["05"], "trace_dir": str(tmp_path),
                                     "progress": False})
    eager, graph, exercise = rec["results"]
    from course_kit.profiling import step_table
    rows = step_table.step_rows(files.load("05-exercise", where=tmp_path))
    assert len(rows) > 100 and {r["kind"] for r in rows} == {"matmul", "other"}
    assert eager["gpu_idle_method"] == graph["gpu_idle_method"] == profiling.GPU_IDLE_METHOD
    assert eager["kernels_per_step"] > 100 and graph["idle_fraction"] < eager["idle_fraction"]
