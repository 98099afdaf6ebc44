"""`course-kit bench speculative` and the lesson's live run, end to end on a CPU, with small stand-in
checkpoints written in the shipped layout (the bench reads whatever pair data/models holds)."""
import json

import pytest
import torch

from course_kit.models import llama
from course_kit.capstone.speculative import measure, pair as P
from course_kit.capstone.speculative.train_pair import save_model


@pytest.fixture(scope="module")
def small_pair(tmp_path_factory):
    folder = tmp_path_factory.mktemp("data")
    models = folder / "models"
    models.mkdir()
    shapes = {"target": dict(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=128),
              "draft": dict(dim=64, n_layers=1, n_heads=4, n_kv_heads=2, ffn_dim=128)}
    record = {"models": {}}
    for role, shape in shapes.items():
        cfg = llama.ModelConfig(vocab_size=P.VOCAB, max_seq_len=P.MAX_POSITIONS, **shape)
        model = llama.Transformer.from_config(cfg, seed=3)
        with torch.no_grad():
            model.tok_embeddings.weight.mul_(30.0)      # peaked logits: target and draft often agree
        save_model(model, models / P.NAMES[role])
        record["models"][role] = {"params": cfg.num_params(), "heldout_ppl": 1.0}
    (models / P.TOKENIZER).write_text(json.dumps({"kind": "bytes"}))
    from safetensors.torch import save_file
    g = torch.Generator().manual_seed(0)
    save_file({"tokens": torch.randint(0, P.VOCAB, (2, P.SEQ_LEN + 1), generator=g, dtype=torch.int32)},
              str(models / P.SLICE))
    (models / P.RECORD).write_text(json.dumps(record))
    return folder


def test_bench_records_every_peer_and_phase(small_pair, monkeypatch):
    monkeypatch.setenv("COURSE_KIT_DATA", str(small_pair))
    from course_kit.benchmarks import speculative as bench_spec
    rec = bench_spec.run({"size": "smoke", "device": "cpu", "hf": True})
    s = rec["summary"]
    assert "errors" not in s, s.get("errors")
    assert all(s["greedy_identical_fp32"].values())
    names = {r["name"] for r in rec["results"]}
    assert {"target/runner", "target/rounds_k0", "speculative/trained/k1", "speculative/trained/k2",
            "speculative/random/k2", "speculative/target/k2"} <= names
    self_draft = next(r for r in rec["results"] if r["name"] == "speculative/target/k2")
    assert self_draft["alpha"] == 1.0 and self_draft["tokens_per_round"] == pytest.approx(3.0, abs=0.3)
    best = next(r for r in rec["results"] if r["name"] == f"speculative/trained/k{s['best_k']}")
    assert best["agreement_with_target_alone"] == 1.0
    assert s["step_costs"]["c"] > 0 and best["predicted_speedup"] > 0
    assert set(s["meets"]) == set(s["targets"]) == {"speedup_vs_target", "vs_hf_assisted"}
    # HF's peers ran on the same checkpoints and gave the same greedy tokens
    assert {"hf_generate", "hf_assisted_default", f"hf_assisted_k{s['best_k']}"} <= names
    assert s["hf_outputs_agreement_with_target"] == 1.0 and s["hf_assisted_matches_hf_generate"]
    assert s["vs_hf_assisted"] > 0


def test_live_run_says_where_each_token_came_from(small_pair, monkeypatch):
    monkeypatch.setenv("COURSE_KIT_DATA", str(small_pair))
    target, draft = P.load_pair()
    prompt = measure.prompts(1, 12)[0]
    out = measure.live_run(target, draft, 2, prompt, 10, step_repeat=2)
    assert out["same_tokens_as_target"] and out["tokens"] == llama.generate(target, [prompt], 10)[0]
    assert len(out["provenance"]) == 10 and out["provenance"][0] == "prefill"
    assert set(out["provenance"][1:]) <= {"draft", "target"}
    rounds = out["row"]["rounds"]                       # one target token ends each round (the last may be cut)
    assert rounds - 1 <= out["provenance"].count("target") <= rounds
    assert out["predicted_speedup"] > 0 and out["costs"]["c"] > 0
