"""Training-side parallelism (notebook 09, §9): FSDP2 against plain DP on 2 gloo ranks, activation
recomputation against plain gradients and the activation formula, gradient accumulation against
the full-batch step, and the peak-memory probe against known allocations."""
from __future__ import annotations

import pytest
import torch

from course_kit.models.tiny_gpt import TinyGPT, batches, config, markov_tokens
from course_kit.parallel import accumulate, fsdp, launcher, recompute
from course_kit.parallel.step_memory import step_peak_bytes
from course_kit.parallel.zero import zero_bytes_per_gpu


@pytest.fixture(scope="module")
def pool2():
    return launcher.get_pool(2, "gloo")       # shared with tests/test_parallel.py


def test_fsdp2_trains_exactly_as_plain_dp_and_holds_zero3_bytes(pool2):
    results = pool2.run(fsdp.check_fsdp, steps=3)
    for r in results:
        assert r["fsdp_vs_dp"] < 1e-6                  # float32 sums; here the same order: 0
        assert r["moved_from_init"] > 1e-3             # the steps did train
        for part in fsdp.PARTS:
            # each rank holds half of DP's bytes, as ZeRO-3 says (padding aside: the smoke model's
            # dims are even, so there is none)
            assert r["held_fsdp"][part] == pytest.approx(r["zero3"][part], rel=0.02)
            assert r["held_dp"][part] == 2 * r["held_fsdp"][part]
    assert results[0]["held_fsdp"] == results[1]["held_fsdp"]


def test_zero3_prediction_is_sixteen_bytes_per_parameter_over_n():
    pred = fsdp.zero3_prediction(1000, 4)
    assert pred == {"weights": 1000.0, "gradients": 1000.0, "optimizer state": 2000.0}
    assert sum(pred.values()) == 16 * 1000 / 4
    assert pred == zero_bytes_per_gpu(1000, 4, 3, k=8, low_bytes=4)


def _fsdp_result(held_total_scale):
    zero3 = fsdp.zero3_prediction(1000, 2)
    held = {p: v * held_total_scale for p, v in zero3.items()}
    return {"world_size": 2, "fsdp_vs_dp": 0.0, "moved_from_init": 0.03, "held_fsdp": held, "zero3": zero3,
            "held_dp": {p: 2 * v for p, v in zero3.items()}}


def test_explain_fsdp_follows_the_bytes():
    same = fsdp.explain_fsdp(_fsdp_result(1.0))
    more = fsdp.explain_fsdp(_fsdp_result(1.5))
    assert "about the same as ZeRO-3" in same and "2.00x less than plain DP" in same
    assert "more than ZeRO-3" in more and "1.33x less than plain DP" in more


def test_recomputed_gradients_equal_the_plain_ones():
    r = recompute.check_grads("smoke", batch=4)
    # the same operations on the same values, run again: bit for bit on a CPU
    assert r["bitwise_equal"] and r["max_abs_diff"] == 0.0 and r["tensors"] == 28


def test_recompute_keeps_parameter_names_and_can_be_undone():
    model = TinyGPT.from_preset("smoke")
    names = list(model.state_dict())
    assert recompute.enable(model) == 2 and recompute.enabled(model)
    assert list(model.state_dict()) == names
    x = batches(markov_tokens(64, 4096), 2, 32, 1)[0]
    loss = model.loss(x)
    recompute.disable(model)
    assert not recompute.enabled(model)
    assert torch.equal(loss, model.loss(x))


def test_activation_formula_is_korthikantis_table_without_dropout_or_scores():
    assert recompute.layer_values() == 16          # (34 bytes - 2 one-byte masks) / 2 bytes per value
    cfg = config("cpu")                             # 4 layers, d 128, seq 128
    plain = recompute.activation_formula(cfg, 2, 4, recompute=False)
    rec = recompute.activation_formula(cfg, 2, 4, recompute=True)
    sbh = 128 * 2 * 128
    assert plain["blocks_bytes"] == 4 * 16 * sbh * 4
    assert rec["blocks_bytes"] == (4 + 16) * sbh * 4
    with pytest.raises(ValueError, match="batch"):
        recompute.activation_formula(cfg, 0)


def test_recompute_lowers_the_measured_peak_about_as_the_formula_says():
    plain = recompute.measure("smoke", 8, recompute=False, repeat=2)
    rec = recompute.measure("smoke", 8, recompute=True, repeat=2)
    drop, predicted = plain["peak_bytes"] - rec["peak_bytes"], plain["formula_blocks_bytes"] - rec["formula_blocks_bytes"]
    assert drop > 0 and drop == pytest.approx(predicted, rel=0.35)
    text = recompute.explain_recompute(plain, rec)
    assert "less than without" in text
    flipped = recompute.explain_recompute(rec, plain)
    assert "more than without" in flipped and "did not drop" in flipped


def test_step_peak_bytes_counts_what_is_live_at_once():
    def two_in_turn():
        a = torch.empty(1 << 20, dtype=torch.uint8)
        del a
        b = torch.empty(1 << 20, dtype=torch.uint8)
        return b.numel()

    peak, out = step_peak_bytes(two_in_turn, "cpu")
    assert out == 1 << 20 and peak == 1 << 20      # one MiB at a time, never two

    def two_at_once():
        a, b = torch.empty(1 << 20, dtype=torch.uint8), torch.empty(1 << 20, dtype=torch.uint8)
        return a, b

    assert step_peak_bytes(two_at_once, "cpu")[0] == 2 << 20
    with pytest.raises(ValueError, match="device"):
        step_peak_bytes(lambda: None, "meta")


@pytest.mark.parametrize("micro", [2, 8])
def test_accumulation_equals_the_full_batch_step(micro):
    r = accumulate.check_accumulation("smoke", batch=8, micro=micro, steps=2)
    assert r["grads_rel_diff"] < 1e-5 and r["params_rel_diff"] < 1e-5 and r["loss_diff"] < 1e-5


def test_accumulation_without_dividing_by_k_is_not_the_step():
    cfg = config("smoke")
    x = batches(markov_tokens(cfg.vocab, 4096), 8, cfg.seq_len, 1)[0]
    full, acc, wrong = (TinyGPT.from_config(cfg) for _ in range(3))
    full.loss(x).backward()
    accumulate.accumulate_grads(acc, x, 4)
    for chunk in x.chunk(4):                         # the classic slip: sum of means, not their mean
        wrong.loss(chunk).backward()
    g = lambda m: torch.cat([p.grad.flatten() for p in m.parameters()])  # noqa: E731
    torch.testing.assert_close(g(acc), g(full), rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(g(wrong), 4 * g(full), rtol=1e-5, atol=1e-7)
    with pytest.raises(ValueError, match="divides"):
        accumulate.accumulate_grads(full, x, 3)


def test_accumulation_cost_and_its_explainer():
    rows = accumulate.cost("smoke", 8, (1, 4), repeat=2)
    assert [r["micro_batch"] for r in rows] == [8, 2]
    assert rows[1]["peak_bytes"] < rows[0]["peak_bytes"]
    text = accumulate.explain_accumulation(rows, {"micro": 4, "grads_rel_diff": 1e-7, "params_rel_diff": 2e-7})
    assert "less than the whole batch" in text and "1.0e-07" in text
    flipped = [dict(rows[0], micro=1), dict(rows[1], peak_bytes=rows[0]["peak_bytes"] * 2)]
    assert "more than the whole batch" in accumulate.explain_accumulation(flipped)
    with pytest.raises(ValueError, match="micro=1"):
        accumulate.explain_accumulation(rows[1:])


@pytest.mark.gpu
def test_fsdp_over_nccl_on_two_gpus():
    from course_kit import device
    if not device.has_cuda() or torch.cuda.device_count() < 2:
        pytest.skip(fsdp.PENDING)
    results = launcher.launch(fsdp.measure_fsdp, 2, backend="nccl", preset="smoke", batch=8, steps=4)
    for r in results:
        assert r["fsdp"]["weights"] == pytest.approx(r["dp"]["weights"] / 2, rel=0.05)


def test_the_bench_records_recompute_accumulation_and_fsdp_pending():
    from course_kit.benchmarks import train_parallel
    out = train_parallel.run({"size": "smoke", "device": "cpu"})
    assert out["recompute"]["with"]["peak_bytes"] < out["recompute"]["without"]["peak_bytes"]
    assert [r["micro"] for r in out["accumulation"]] == [1, 2, 4, 8]
    assert out["fsdp"] is None and out["errors"] == {"fsdp": fsdp.PENDING} and out["summary"]["fsdp_pending"]


def test_explain_grads_and_nccl_follow_the_numbers():
    assert "bit for bit" in recompute.explain_grads({"bitwise_equal": True, "max_abs_diff": 0.0, "tensors": 3})
    assert "differ" in recompute.explain_grads({"bitwise_equal": False, "max_abs_diff": 1e-7, "tensors": 3})
    part = {"weights": 2 << 20, "gradients": 2 << 20, "optimizer state": 4 << 20}
    half = {k: v // 2 for k, v in part.items()}
    r0 = {"world_size": 2, "preset": "small_gpu", "batch": 16,
          "dp": {"step_s": 0.010, "step_peak_bytes": 100 << 20, **part},
          "fsdp": {"step_s": 0.012, "step_peak_bytes": 60 << 20, **half}}
    text = fsdp.explain_nccl(r0)
    assert "1.20x slower than DDP's" in text and "40 MiB less than DDP" in text and "4 MiB of training state" in text
    faster = fsdp.explain_nccl({**r0, "fsdp": {**r0["fsdp"], "step_s": 0.005}})
    assert "2.00x faster than DDP's" in faster
