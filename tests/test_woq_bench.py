"""`course-kit bench woq`'s plan (benchmarks/woq.py) with its measurements faked: the launch-setting
sweep keeps the fastest setting and uses it for the rest of the run, a failing phase is recorded
and the others still run, and phases that would overrun the time budget are skipped and say so.
(The measurements themselves run in `course-kit bench woq` and in the other test_woq_* files.)
"""
from types import SimpleNamespace

import pytest
import torch

from course_kit.benchmarks import woq as B
from course_kit.cuda_graphs.decode_kernels import woq_gemv as W


@pytest.fixture
def fake(monkeypatch):
    seen = {"products": [], "built": []}

    def runner_row(model, fmt, spec, dev, copy_gbs, gs):
        # int4 runs fastest with 8 KiB tiles and 6 programs an SM, int8 with the default
        bonus = 1.3 if (fmt == "int4" and W.PROGRAMS_PER_SM == 6) else 1.0
        tps = {"bf16": 1000.0, "int8": 1700.0, "int4": 2600.0}[fmt] * bonus
        row = {"model": model.config.name, "format": fmt, "batch": 1, "n_layers": 16, "tokens_per_s": tps,
               "ms_per_token": 1e3 / tps, "bytes_per_token": {"bf16": 2.4e9, "int8": 1.3e9, "int4": 0.7e9}[fmt],
               "fraction_of_copy": 0.7}
        return row, SimpleNamespace(decode=SimpleNamespace(pdl=True, fmt=fmt))

    def products(step, fmt, copy_gbs, dev, repeat, pdl):
        seen["products"].append((fmt, W.PROGRAMS_PER_SM, W.TILE_BYTES))
        if fmt == "int8":
            raise RuntimeError("a kernel that failed")
        return [{"model": "llama-1b", "format": fmt, "product": "w13", "weight_bytes": 1e6, "median_s": 1e-6}]

    def build(cfg, seed, dtype, device):
        seen["built"].append(cfg.name)
        return SimpleNamespace(config=cfg, decode=None)

    monkeypatch.setattr(B.measure, "runner_row", runner_row)
    monkeypatch.setattr(B.measure, "products", products)
    monkeypatch.setattr(B.measure, "peers", lambda model, ms, dev, repeat, gs: [
        {"shape": f"{model.config.name} w13", "model": model.config.name, "product": "w13", "format": f, "m": m,
         "n": 16384, "k": 2048, "median_s": t * 1e-6, "kernel": f"{f} peer"}
        for f, times in (("bf16", (15, 30)), ("int8", (25, 60)), ("int4", (6, 40))) for m, t in zip(ms, times)])
    monkeypatch.setattr(B, "compare_steps", lambda ref, cand, cfg, positions, dtype, dev: {
        "positions": positions, "agreement": 0.97, "max_abs_dlogit": 0.1})
    monkeypatch.setattr(B.llama.Transformer, "from_config", staticmethod(build))
    monkeypatch.setattr(B, "_ceilings", lambda spec, dev, dtype: {"copy_gbs": 4000.0, "matmul_tflops": 800.0})
    return seen


def _params(**kw):
    return {"size": "full", "device": "cpu", "dtype": torch.bfloat16, "peer_ms": [1, 64], **kw}


def test_the_sweep_keeps_the_fastest_setting_and_a_failed_phase_is_recorded(fake):
    out = B.run(_params(models=["llama-1b"]))
    s = out["summary"]
    int4 = next(r for r in out["results"] if r.get("kind") == "runner" and r["format"] == "int4")
    assert int4["settings"] == B.SWEEP["int4"][2] and int4["tokens_per_s"] == pytest.approx(2600 * 1.3)
    assert len([r for r in out["results"] if r.get("kind") == "sweep"]) == len(B.SWEEP["int8"]) + len(B.SWEEP["int4"])
    # the products of int4 ran under its chosen setting, and the module's constants were put back
    assert ("int4", 6, 8192) in fake["products"] and W.PROGRAMS_PER_SM == 3 and W.TILE_BYTES == 16384
    assert s["errors"] == {"llama-1b/int8 products": "RuntimeError: a kernel that failed"}
    assert s["int4_vs_bf16_llama-1b"] == pytest.approx(3.38) and s["meets"]["int4_vs_bf16_llama-1b"]
    assert s["int8_agreement_llama-1b"] == 0.97 and s["meets"]["int8_agreement_llama-1b"]
    assert s["crossing"]["llama-1b w13"]["measured"]["int4"]["last_faster"] == 1
    assert "int4 turns compute-bound" in s["explain"]["crossing"]


def test_phases_that_would_overrun_the_budget_are_skipped_and_say_so(fake, monkeypatch):
    late = []          # the clock jumps to 149 s once llama-1b's quality has run

    def compare(ref, cand, cfg, positions, dtype, dev):
        late.append(cfg.name)
        return {"positions": positions, "agreement": 0.97, "max_abs_dlogit": 0.1}
    monkeypatch.setattr(B, "compare_steps", compare)
    monkeypatch.setattr(B._Log, "elapsed", lambda self: 149.0 if late else 0.0)
    out = B.run(_params(models=["llama-1b", "llama3-8b"]))
    assert fake["built"] == ["llama-1b"]                    # the 8B shape was not even built
    assert "time budget" in out["summary"]["skipped"]["llama3-8b"]
    late.clear()
    monkeypatch.setattr(B._Log, "elapsed", lambda self: 149.0)
    unbounded = B.run(_params(models=["llama-1b", "llama3-8b"], budget_s=None))
    assert "skipped" not in unbounded["summary"] and fake["built"][-1] == "llama3-8b"
