"""The model bench's correctness check (`course-kit bench model`): honest about bf16 near-ties."""
import pytest
import torch

from course_kit.benchmarks import model as mb
from course_kit import benchmarks


def test_model_bench_smoke_on_cpu_is_ok_in_fp32():
    rec = benchmarks.run_topic("model", {"size": "smoke", "device": "cpu"})
    check = rec["summary"]["tiny_check"]
    assert check["ok"] and check["fp32"]["first_mismatch"] is None
    assert check["logits"]["max_rel_err_maxnorm"] < 1e-4 and check["logit_tol_maxnorm"] == mb.FP32_LOGIT_TOL


def test_bf16_comparison_and_fp32_tokens_on_the_tiny_model():
    prompt = mb.prompt_for(mb.llama.ModelConfig.from_preset("tiny"), 8, "cpu")
    model, hf = mb.build("tiny", torch.bfloat16, "cpu")
    low = mb.compare_steps(mb.CourseDecoder(model, prompt, 16), mb.HFDecoder(hf, prompt), 4)
    fp32 = mb.fp32_check("tiny", prompt, 4, "cpu")
    assert fp32["first_mismatch"] is None and fp32["tokens_agree"] == 4 and fp32["max_rel_err_maxnorm"] < 1e-4
    assert low["max_rel_err_maxnorm"] < mb.LOGIT_TOL
    assert mb.judge(low, fp32, True)["ok"]
    assert torch.get_float32_matmul_precision() == "highest"  # strict_fp32 restored the default


def test_judge_separates_bf16_token_flips_from_real_errors():
    fp32 = {"max_rel_err": 1e-6, "max_rel_err_maxnorm": 2e-6, "first_mismatch": None, "tokens_agree": 4, "steps": 4}
    near_tie = {"max_rel_err": 0.05, "max_rel_err_maxnorm": 0.06, "first_mismatch": 1, "tokens_agree": 1, "steps": 8}
    v = mb.judge(near_tie, fp32, True)
    assert v["ok"] and not v["tokens_identical_low_precision"] and "information" in v["rule"]
    assert not mb.judge({**near_tie, "max_rel_err_maxnorm": 0.3}, fp32, True)["ok"]
    assert not mb.judge(near_tie, {**fp32, "first_mismatch": 2}, True)["ok"]
    assert not mb.judge(near_tie, {**fp32, "max_rel_err_maxnorm": 0.01}, True)["ok"]


@pytest.mark.gpu
def test_gpu_model_check_llama_1b_bf16_is_ok():
    prompt = mb.prompt_for(mb.llama.ModelConfig.from_preset("llama-1b"), 128, "cuda")
    model, hf = mb.build("llama-1b", torch.bfloat16, "cuda")
    low = mb.compare_steps(mb.CourseDecoder(model, prompt, 160), mb.HFDecoder(hf, prompt), 8)
    del model, hf
    mb.free()
    check = mb.judge(low, mb.fp32_check("llama-1b", prompt, mb.FP32_CHECK_STEPS, "cuda"), True)
    assert check["ok"], check
