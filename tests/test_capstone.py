"""The capstone bench topic: correctness gate, one clock for every variant (the exercise 10.first_rung
is tested in tests/test_exercises_nb09_10.py)."""
import pytest
import torch

from course_kit.benchmarks import capstone
from course_kit.models.hf import model_to_hf
from course_kit import benchmarks


def test_capstone_topic_smoke_on_cpu():
    threads = torch.get_num_threads()
    rec = benchmarks.run_topic("capstone", {"size": "smoke", "n_requests": 4})
    assert torch.get_num_threads() == threads          # restored after the run
    s = rec["summary"]
    assert all(s["correct_fp32"].values()) and set(s["correct_fp32"]) == set(capstone.engine_variants(False))
    names = [r["name"] for r in rec["results"]]
    assert names == list(capstone.engine_variants(False)) + ["HF generate", "HF generate_batch"]
    measured = [r for r in rec["results"] if "throughput_tok_s" in r]
    assert len(measured) == 3 and all(r["throughput_tok_s"] > 0 for r in measured)
    assert s["engine_vs_HF_generate"] == pytest.approx(
        s["throughput_tok_s"][s["full_engine"]] / s["throughput_tok_s"]["HF generate"])
    assert {"cpu", "gpu"} <= {r["lane"] for r in rec["timeline"]}


def test_variants_add_one_technique_at_a_time():
    assert list(capstone.engine_variants(True)) == [
        "engine: continuous + paged KV", "engine: + CUDA graphs", "engine: + fused blocks",
        "engine: + async loop"]
    assert "engine: + CUDA graphs" not in capstone.engine_variants(False)


@pytest.mark.gpu
def test_gpu_engine_variants_match_hf_in_fp32():
    from course_kit.benchmarks.batching import _check_same, hf_generate_greedy
    from course_kit.engine import SamplingParams
    from course_kit.models import llama
    m = llama.Transformer.from_preset("smollm-135m", seed=0, dtype=torch.float32, device="cuda")
    hf = model_to_hf(m)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, m.config.vocab_size, (n,), generator=g).tolist() for n in (17, 40, 5, 64)]
    ref = [hf_generate_greedy(hf, p, 24) for p in prompts]
    opts = dict(max_num_seqs=8, max_num_batched_tokens=512, max_model_len=128)
    for name, spec in capstone.engine_variants(True).items():
        outs = capstone._build(m, spec, opts).generate(prompts, SamplingParams(max_new_tokens=24))
        for p, r, o in zip(prompts, ref, outs):   # identical, or diverging only at a logit tie
            _check_same(hf, p, r, o.tokens, name)
