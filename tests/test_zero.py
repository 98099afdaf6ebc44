"""ZeRO memory per GPU against the paper's table, ZeRO-1 against plain DP on gloo, and sequence
parallelism's activation arithmetic against Korthikanti et al. (notebook 09)."""
import pytest

from course_kit.dtypes import memory
from course_kit.parallel import launcher, sequence, zero


@pytest.mark.parametrize("stage,gb", [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.88)])
def test_zero_bytes_match_table_1_of_the_paper(stage, gb):
    # Rajbhandari et al. 2020, table 1: 7.5B parameters, N_d = 64, K = 12
    got = sum(zero.zero_bytes_per_gpu(7.5e9, 64, stage).values()) / 1e9
    assert got == pytest.approx(gb, rel=0.01)


def test_zero_stages_shard_one_more_part_each():
    parts = [zero.zero_bytes_per_gpu(1e9, 8, s) for s in zero.STAGES]
    assert sum(parts[0].values()) == 16e9          # 2 + 2 + 12 bytes per parameter, replicated
    assert parts[1]["optimizer state"] == 12e9 / 8 and parts[1]["gradients"] == 2e9
    assert parts[2]["gradients"] == 2e9 / 8 and parts[2]["weights"] == 2e9
    assert parts[3]["weights"] == 2e9 / 8
    assert zero.zero_bytes_per_gpu(1e9, 1, 3) == parts[0]   # one GPU: nothing to shard over
    with pytest.raises(ValueError, match="stage"):
        zero.zero_bytes_per_gpu(1e9, 8, 4)
    with pytest.raises(ValueError, match="n_gpus"):
        zero.zero_bytes_per_gpu(1e9, 0, 1)


def test_zero1_equals_plain_dp_after_several_steps():
    out = launcher.launch(zero.check_zero1, 2, steps=4, backend="gloo")
    for r in out:
        assert r["moved_from_init"] > 1e-2            # the steps did move the parameters
        assert r["zero1_vs_dp"] < 1e-6 and r["torch_zero_vs_dp"] < 1e-6
        assert r["state_bytes_zero1"] * 2 == pytest.approx(r["state_bytes_dp"], rel=0.01)


@pytest.mark.parametrize("tp,sp,flash", [(1, False, False), (4, False, False), (4, True, False),
                                         (8, True, True), (2, False, True)])
def test_sequence_parallel_arithmetic_matches_the_paper(tp, sp, flash):
    s, b, h, a = 2048, 2, 4096, 32
    got = sequence.layer_activation_bytes(s, b, h, a, tp, sp, flash)
    attn = 0 if flash else 5 * a * s / h
    want = s * b * h * ((34 + attn) / tp if sp else 10 + 24 / tp + attn / tp)   # section 4
    assert got == pytest.approx(want)
    assert got * 3 == pytest.approx(memory.activation_bytes(3, h, a, s, b, tp=tp, sequence_parallel=sp,
                                                            flash=flash))


def test_sequence_parallel_splits_exactly_what_tp_leaves_whole():
    whole = {r["part"]: r["bytes"] for r in sequence.layer_activation_parts(1024, 1, 1024, 8, 4)}
    split = {r["part"]: r["bytes"] for r in sequence.layer_activation_parts(1024, 1, 1024, 8, 4, True)}
    regions = {r["part"]: r["region"] for r in sequence.layer_activation_parts(1024, 1, 1024, 8, 4)}
    for part, region in regions.items():
        assert split[part] == (whole[part] / 4 if region == "seq" else whole[part])
    assert sum(v for k, v in whole.items() if regions[k] == "seq") == 10 * 1024 * 1024
    c = sequence.sp_comparison(1024, 1, 1024, 8, 2, 4)
    assert c["one GPU"] > c["TP=4"] > c["TP=4 + sequence parallel"] == pytest.approx(c["one GPU"] / 4)
    with pytest.raises(ValueError, match="divisible"):
        sequence.layer_activation_parts(1001, 1, 64, 8, 4, True)
