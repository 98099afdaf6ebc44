"""AOTInductor (notebook 04, §6): the exported decode step against eager, the fresh-process harness,
the package cache, the gallery trap it refuses, and the compiled package against eager outputs.

Compiling a package runs g++ on the generated wrapper: 30-80 s on a 2-core CPU. So the default run
checks every step but the compiler (export, the fresh process, the cache, the refusal), and the
compile itself runs with COURSE_KIT_AOTI_COMPILE=1 (or `pytest -m gpu` on a GPU):
    COURSE_KIT_AOTI_COMPILE=1 .venv/bin/pytest tests/test_aoti.py -q
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from course_kit.benchmarks import aoti as aoti_bench
from course_kit.capture import aoti
from course_kit.capture.methods import MLPBlock
from course_kit.models.tiny_gpt import TinyGPT

COMPILE = os.environ.get("COURSE_KIT_AOTI_COMPILE") == "1"


@pytest.fixture(scope="module")
def model():
    return TinyGPT.from_preset("smoke", seed=0).eval()


@pytest.fixture(scope="module")
def exported(model):
    return aoti.export_decode(model)[0]


def test_the_exported_decode_step_equals_eager(model, exported):
    assert aoti.check_export(model, exported, steps=3) == 0.0
    kinds = {s.kind.name for s in exported.graph_signature.input_specs}
    assert kinds == {"PARAMETER", "USER_INPUT"}           # the weights travel with the graph
    # the later steps read what the earlier ones wrote into the cache: a dropped write would show
    eager = aoti.eager_logits(model, 3)
    assert not torch.allclose(eager[1], eager[2])
    g = aoti.graph_summary(exported)
    assert (g["cache_writes"], g["linears"], g["attention"]) == (4, 9, 2)   # 2 layers x 4, + the tied output
    text = aoti.explain_export(g, 1.0, 0.0, 3)
    assert "equal to eager's" in text and "4 in-place writes" in text
    assert "within 1.0e-06 of eager's" in aoti.explain_export(g, 1.0, 1e-6, 3)


def test_cold_start_runs_a_fresh_process_and_returns_its_logits(model):
    r = aoti.cold_start("eager", preset="smoke", steps=3, repeat=2, threads=1)
    assert torch.equal(r.pop("logits"), aoti.eager_logits(model, 3))
    assert r["mode"] == "eager" and r["threads"] == 1
    for key in ("import_s", "load_s", "first_call_s", "steady_s"):
        assert r[key] > 0
    assert r["process_s"] >= r["cold_start_s"] > r["import_s"]
    with pytest.raises(ValueError, match="package"):
        aoti.cold_start("aoti", preset="smoke", package="/nonexistent.pt2")
    with pytest.raises(ValueError, match="mode"):
        aoti.cold_start("jit", preset="smoke")


def test_the_data_dependent_branch_is_refused_before_any_compiling():
    r = aoti.refusal("data-dependent branch")
    assert r["refused"] and r["stage"].startswith("torch.export")
    assert "data-dependent" in r["error"]
    assert not aoti.refusal("a global")["refused"]         # exported as captured: SCALE baked in
    with pytest.raises(ValueError, match="trap"):
        aoti.refusal("a closure")


def test_package_key_follows_graph_and_weights():
    x = torch.randn(4, 16)
    keys = [aoti.package_key(torch.export.export(MLPBlock(16, seed=s).eval(), (x,))) for s in (0, 0, 1)]
    assert keys[0] == keys[1] != keys[2]


def test_compile_package_reuses_a_cached_package(tmp_path, monkeypatch, exported):
    calls = []

    def fake_compile(ep, package_path):
        calls.append(package_path)
        Path(package_path).write_bytes(b"pt2")
        return package_path

    monkeypatch.setattr(torch._inductor, "aoti_compile_and_package", fake_compile)
    first = aoti.compile_package(exported, tmp_path)
    again = aoti.compile_package(exported, tmp_path)
    assert not first["cached"] and again["cached"] and again["path"] == first["path"] and len(calls) == 1
    assert aoti.compile_package(exported, tmp_path, use_cache=False)["cached"] is False and len(calls) == 2
    assert [p.name for p in tmp_path.iterdir()] == [Path(first["path"]).name]   # no temporary left
    assert aoti.cached_package(exported, tmp_path) == first["path"]
    assert aoti.cached_package(exported, tmp_path / "elsewhere") is None


def _cold(total, steady, first=0.1):
    return {"import_s": 1.0, "load_s": total - 1.0 - first, "first_call_s": first, "cold_start_s": total,
            "steady_s": steady}


def test_explain_cold_start_follows_the_numbers():
    fast = aoti.explain_cold_start({"aoti": _cold(2.0, 1e-4), "compile": _cold(20.0, 2e-4, 15.0),
                                    "eager": _cold(3.0, 1e-3)}, "this CPU")
    assert "10.00x faster than** torch.compile" in fast and "10.00x faster than eager" in fast
    assert "2.00x faster than the compiled step" in fast
    slow = aoti.explain_cold_start({"aoti": _cold(4.0, 4e-4), "compile": _cold(2.0, 2e-4)}, "this CPU")
    assert "2.00x slower than** torch.compile" in slow and "slower than the compiled step" in slow
    with pytest.raises(ValueError, match="compile"):
        aoti.explain_cold_start({"aoti": _cold(1.0, 1e-4)}, "x")


def test_the_bench_records_skips_and_summarises(monkeypatch):
    seen = []

    def fake_cold(mode, **kw):
        seen.append(mode)
        return {**_cold(2.0, 1e-4), "logits": aoti.eager_logits(TinyGPT.from_preset("smoke").eval(), kw["steps"])}

    monkeypatch.setattr(aoti, "cold_start", fake_cold)
    errors = {}
    row = aoti_bench.device_phase("cpu", "smoke", 2, 2, deadline=0.0, errors=errors)   # the budget is spent
    assert seen == ["eager"] and "skipped" in errors["cpu_compile"] and "skipped" in errors["cpu_cold_compile"]
    assert row["rel_diff"] == {"export": 0.0, "eager": 0.0}
    s = aoti_bench.summarize([{"device": "cpu", "rel_diff": {"aoti": 0.0}, "cold": {
        "aoti": _cold(2.0, 1e-4), "compile": _cold(8.0, 2e-4), "eager": _cold(3.0, 4e-4)}}], None)
    assert s["checks_passed"] and s["cpu_cold_start_speedup_vs_compile"] == 4.0
    assert s["cpu_steady_speedup_vs_eager"] == pytest.approx(4.0)


def test_a_crashed_peer_is_reported_and_the_others_still_run(model, monkeypatch):
    # the H200 recording of 2026-12-02: the aoti child died of SIGSEGV with nothing on stderr
    import signal
    assert aoti.exit_reason(-signal.SIGSEGV, "") == "the process was killed by SIGSEGV, with no error text"
    assert aoti.exit_reason(1, "x\nValueError: bad\n") == "exit 1: ValueError: bad"
    seen = []

    def fake_cold(mode, **kw):
        seen.append(mode)
        if mode == "aoti":
            raise RuntimeError(f"the aoti cold start failed: {aoti.exit_reason(-11, '')}")
        return {**_cold(2.0, 1e-4), "logits": aoti.eager_logits(model, kw["steps"])}

    monkeypatch.setattr(aoti, "cold_start", fake_cold)
    rows, failed = aoti.cold_starts(model, preset="smoke", steps=3)
    assert seen == ["aoti", "compile", "eager"] and set(rows) == {"compile", "eager"}
    assert "SIGSEGV" in failed["aoti"]
    line = aoti.explain_failures(failed, "this machine (cuda)")
    assert line.startswith("**No aoti cold start on this machine (cuda):**") and "record below" in line
    assert aoti.explain_failures({}, "x") == ""

    def wrong_cold(mode, **kw):     # wrong logits are a bug, not a failure to report
        return {**_cold(2.0, 1e-4), "logits": aoti.eager_logits(model, kw["steps"]) + 1.0}

    monkeypatch.setattr(aoti, "cold_start", wrong_cold)
    with pytest.raises(AssertionError, match="differ from eager"):
        aoti.cold_starts(model, modes=("eager",), preset="smoke", steps=3)


@pytest.mark.slow
@pytest.mark.skipif(not COMPILE, reason="compiles a package (30-80 s on 2 cores): set COURSE_KIT_AOTI_COMPILE=1")
def test_the_package_matches_eager_in_a_fresh_process(model, exported, tmp_path):
    pk = aoti.compile_package(exported, tmp_path, use_cache=False)
    assert pk["bytes"] > 0 and pk["seconds"] > 0
    r = aoti.cold_start("aoti", preset="smoke", package=pk["path"], steps=4, repeat=3, threads=1)
    want = aoti.eager_logits(model, 4)
    assert float((r["logits"] - want).abs().max()) <= 1e-5 * float(want.abs().max())
    assert r["load_s"] > 0 and r["first_call_s"] > 0


@pytest.mark.gpu
@pytest.mark.slow
def test_the_cuda_package_matches_eager_in_a_fresh_process(tmp_path):
    gpu_model = TinyGPT.from_preset("smoke", seed=0, device="cuda").eval()
    ep, _ = aoti.export_decode(gpu_model)
    pk = aoti.compile_package(ep, tmp_path, use_cache=False)
    r = aoti.cold_start("aoti", preset="smoke", device="cuda", package=pk["path"], steps=4, repeat=5)
    want = aoti.eager_logits(gpu_model, 4)
    assert float((r["logits"] - want).abs().max()) <= aoti_bench.TOLERANCE * float(want.abs().max())


def test_a_pip_only_machine_gets_cuda_headers_for_the_cuda_build(tmp_path, monkeypatch):
    from torch.utils import cpp_extension
    from course_kit.capture import aoti_cuda
    inc = tmp_path / "nvidia" / "cu13" / "include"
    inc.mkdir(parents=True)
    (inc / "cuda_runtime_api.h").write_text("")
    driver = tmp_path / "driver"
    driver.mkdir()
    (driver / "libcuda.so.1").write_text("")
    monkeypatch.setattr(cpp_extension, "CUDA_HOME", None)
    monkeypatch.setattr(aoti_cuda, "_site_roots", lambda: [str(tmp_path)])
    monkeypatch.setattr(aoti_cuda, "_libcuda_dirs", lambda: [str(driver)])
    monkeypatch.setattr(aoti_cuda, "_triton_include", lambda: "/triton/include")
    for var in ("CUDA_HOME", "CUDA_INC_PATH", "LIBRARY_PATH"):
        monkeypatch.delenv(var, raising=False)
    done = aoti_cuda.prepare()
    assert done["cuda_home"] == str(inc.parent) == cpp_extension.CUDA_HOME == os.environ["CUDA_HOME"]
    assert os.environ["CUDA_INC_PATH"] == "/triton/include"       # no cuda.h beside the runtime headers
    link = Path(os.environ["LIBRARY_PATH"]) / "libcuda.so"
    assert link.is_symlink() and os.readlink(link) == str(driver / "libcuda.so.1")
    assert len(done["changes"]) == 3
    # with a toolkit, the headers are left alone
    monkeypatch.setattr(cpp_extension, "CUDA_HOME", "/usr/local/cuda")
    (driver / "libcuda.so").write_text("")
    assert aoti_cuda.prepare() == {"cuda_home": "/usr/local/cuda", "changes": []}
