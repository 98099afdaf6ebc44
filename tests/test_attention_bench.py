"""The `attention` bench topic: every variant checked first, rows and summary well formed."""
import pytest
import torch

from course_kit.benchmarks import attention as topic
from course_kit import benchmarks


def test_cpu_smoke_run_checks_then_times_every_variant():
    out = topic.run({"size": "smoke", "seq_lens": [64, 128], "d64_seq_lens": [], "repeat": 1})
    assert out["summary"]["checks_passed"], out["checks"]
    names = {r["variant"] for r in out["results"]}
    assert {"naive", "tiled (PyTorch)", "sdpa math"} <= names
    for r in out["results"]:
        assert r["median_s"] > 0 and r["tflops"] > 0 and r["peak_bytes"] > 0, r
    naive_128 = next(r for r in out["results"] if r["variant"] == "naive" and r["seq_len"] == 128)
    assert naive_128["flops"] == 4 * 1 * 2 * 128 * 128 * 128 / 2     # causal counts half
    # naive holds the S^2 scores and probabilities (B=1, H=2, bf16 plus a float32 softmax)
    assert naive_128["peak_bytes"] >= 2 * 128 * 128 * (2 + 4)


def test_registered_and_rejects_unknown_size():
    assert "attention" in benchmarks.topics()
    with pytest.raises(ValueError, match="size must be one of"):
        topic.run({"size": "huge"})


def test_summary_ratios_come_from_the_same_rows():
    acc = {"batch": 1, "heads": 1, "seq_len": 8, "head_dim": 64, "causal": True}
    rows = [{"variant": v, **acc, "tflops": t} for v, t in
            [("triton", 300.0), ("triton (TMA)", 360.0), ("sdpa flash", 320.0), ("sdpa cudnn", 450.0)]]
    s = topic.summarise(rows, {"triton": {"ok": True}}, acc)
    assert s["triton_variant"] == "triton (TMA)"
    assert s["triton_over_flash"] == pytest.approx(360 / 320)
    assert s["triton_over_cudnn"] == pytest.approx(0.8)
    # issue 26's targets: at least flash, and at least 0.95x cuDNN
    assert s["meets_flash_target"] and not s["meets_cudnn_target"]
    rows[-1]["tflops"] = 370.0
    assert topic.summarise(rows, {"triton": {"ok": True}}, acc)["meets_cudnn_target"]


@pytest.mark.gpu
def test_gpu_small_run_has_acceptance_ratios():
    out = topic.run({"size": "small_gpu", "seq_lens": [1024, 2048], "d64_seq_lens": [1024],
                     "noncausal_seq_lens": [1024], "repeat": 5})
    assert out["summary"]["checks_passed"], out["checks"]
    assert out["checks"]["triton"]["ok"]
    if torch.cuda.get_device_capability() >= (8, 0):
        assert out["summary"]["triton_over_flash"] > 0


def test_backward_case_checks_then_times_under_the_interpreter():
    pytest.importorskip("triton")
    if torch.cuda.is_available():
        pytest.skip("the gpu run covers it")
    shape = {"batch": 1, "heads": 1, "seq_len": 32, "head_dim": 32, "causal": True}
    check, rows = topic.backward_case(torch.device("cpu"), torch.bfloat16, shape, repeat=1, check_len=40)
    assert check["ok"], check
    assert isinstance(check["max_rel_grad_err"]["sdpa flash"], float)       # CPU flash has a backward
    assert {r["variant"] for r in rows} >= {"triton fwd+bwd", "sdpa flash fwd+bwd"}
    assert all(r["tflops"] > 0 for r in rows)
