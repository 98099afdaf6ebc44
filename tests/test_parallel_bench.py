"""`course-kit bench parallel` end to end at smoke size: gloo on CPU; NCCL on GPUs (marked gpu)."""
import pytest
import torch

from course_kit.benchmarks import parallel as bp
from course_kit import benchmarks


def test_world_sizes_are_powers_of_two():
    assert bp.world_sizes(1) == [1]
    assert bp.world_sizes(2) == [1, 2]
    assert bp.world_sizes(6) == [1, 2, 4]
    assert bp.world_sizes(8) == [1, 2, 4, 8]
    with pytest.raises(ValueError, match="n_devices"):
        bp.world_sizes(0)


def _check_record(rec, worlds):
    s = rec["summary"]
    assert s["world_sizes"] == worlds
    names = {r["name"] for r in rec["results"]}
    assert {"tp_mlp", "decode"} <= names
    for n in worlds:
        assert s[f"mlp_max_rel_err_tp{n}"] < (2e-2 if rec["params"]["dtype"] != "float32" else 1e-5)
        assert s[f"decode_tokens_identical_tiny_tp{n}"] is True
    if 2 in worlds:
        assert {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "pipeline", "ep_moe",
                "ring_attention"} <= names
        assert s["ep_max_rel_err_fp32_n2"] < 1e-5 and s["cp_max_rel_err_fp32_causal_n2"] < 1e-5
        assert "ep_speedup_n2" in s and "cp_speedup_full_n2" in s
        # ring attention against its fair one-rank peer: the same 2 x 2 blocks, causal ones skipped
        ring = {r["causal"]: r for r in rec["results"] if r["name"] == "ring_attention" and r["n"] == 2}
        assert ring[True]["baseline_chunks"] == 2 and ring[True]["bound"] == 1.5 and ring[False]["bound"] == 2.0
        assert ring[True]["baseline_blocks"] == 3 and ring[True]["busiest_blocks"] == 2
        assert "speedup_whole_block" in ring[True]
        assert "decode_tp2_tokens_identical" in s and "mlp_tp2_meets_target" in s
        assert rec["timelines"]
    return s


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU path (gloo) of the topic")
def test_topic_runs_on_cpu_processes():
    rec = benchmarks.run_topic("parallel", {"size": "smoke"})
    s = _check_record(rec, [1, 2])
    assert s["backend"] == "gloo"


@pytest.mark.gpu
def test_topic_smoke_on_gpus():
    """Pre-flight for the full run: NCCL groups, CUDA-graph decode with TP all-reduces inside."""
    worlds = bp.world_sizes(min(torch.cuda.device_count(), 2))
    rec = benchmarks.run_topic("parallel", {"size": "smoke", "worlds": worlds, "compile_models": ["tiny"]})
    s = _check_record(rec, worlds)
    assert s["backend"] == "nccl"
    for row in rec["results"]:
        if row["name"] == "decode":
            for mode in ("cuda_graph", "compile_cuda_graph"):
                assert mode in row["s_per_token_by_mode"], row.get(f"{mode}_error")
            # replaying the captured kernels gives the eager tokens exactly (compiled code fuses
            # element-wise ops, so its rounding may differ: it is only required to run)
            assert row["cuda_graph_tokens_equal_eager"]
            # notebook 05's Triton step on each rank's shard, captured with the all-reduces inside
            assert "triton_graph" in row["s_per_token_by_mode"], row.get("triton_graph_error")
            if "fp32_triton_tokens_identical" in row:
                assert row["fp32_triton_tokens_identical"]
            if row["tp"] > 1:   # sums folded into the products, and the all-reduce form beside it
                assert row.get("triton_exchange") == "folded" and "triton_exchange_error" not in row, row
                assert "triton_graph_all_reduce" in row["s_per_token_by_mode"], row.get("triton_graph_all_reduce_error")


@pytest.mark.gpu
def test_nccl_launch_one_gpu_per_rank_and_clear_error_beyond():
    from course_kit.parallel import launcher
    n = torch.cuda.device_count()
    out = launcher.launch(_device_of_rank, n, backend="nccl", reuse=False)
    assert out == [f"cuda:{r}" for r in range(n)]
    with pytest.raises(ValueError, match=f"needs {n + 1} GPUs"):
        launcher.launch(_device_of_rank, n + 1, backend="nccl")


def _device_of_rank(rank, world_size):
    x = torch.ones(1, device="cuda")
    torch.distributed.all_reduce(x)
    assert x.item() == world_size
    return str(x.device)


@pytest.mark.gpu
def test_folded_tp_exchange_equals_the_all_reduce_on_two_gpus():
    """decode_kernels/exchange.py on two GPUs: the sums folded into the products give the same
    fp32 logits, bit for bit, as an all-reduce after each product; uncaptured and from a graph."""
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    from course_kit.parallel import launcher, tp_llama
    for r in launcher.launch(tp_llama.check_folded_exchange, 2, backend="nccl", reuse=False, timeout_s=300):
        assert r["folded"], "symmetric memory is missing: the step kept its all-reduce"
        assert all(r["uncaptured_equal"]) and all(r["replayed_equal"]), r
        assert r["epoch"] == 6, r            # 3 uncaptured steps and 3 replays (capture runs nothing)
