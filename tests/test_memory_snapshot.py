"""What holds a step's peak memory, from an allocator log: a synthetic snapshot with a known answer."""
from __future__ import annotations

import pytest
import torch

from course_kit.profiling import memory as M

MiB = 2**20


def synthetic():
    """Weights W1 (4 MiB) and W2 (2 MiB), Adam state (12 MiB), a batch (1 MiB) alive before the step.
    Forward: a 16-bit copy of W1 (2 MiB, the cast cache) and activations A1 (8 MiB), A2 (4 MiB), a
    temporary T (3 MiB) freed at once. Backward: grads G1 (4 MiB), G2 (2 MiB); A2 freed, then a
    5 MiB temporary while A1 and the cast are still alive (the peak), then everything of the forward
    freed. Optimizer: a 1 MiB temporary."""
    snapshot = {"segments": [
        {"device": 0, "address": 1000 * MiB, "blocks": [
            {"size": 4 * MiB, "state": "active_allocated"}, {"size": 2 * MiB, "state": "active_allocated"},
            {"size": 12 * MiB, "state": "active_allocated"}, {"size": 3 * MiB, "state": "inactive"},
            {"size": 1 * MiB, "state": "active_allocated"}]}]}
    w1, w2, adam, batch = 1000 * MiB, 1004 * MiB, 1006 * MiB, 1021 * MiB
    a = lambda addr, size: {"action": "alloc", "addr": addr, "size": size}                 # noqa: E731
    f = lambda addr: [{"action": "free_requested", "addr": addr}, {"action": "free_completed", "addr": addr}]  # noqa: E731
    cast, a1, a2, t, g1, g2, tb, to = (2000 * MiB + i * 32 * MiB for i in range(8))
    entries = [a(cast, 2 * MiB), a(a1, 8 * MiB), a(t, 3 * MiB), *f(t), a(a2, 4 * MiB),          # forward: 0..
               a(g1, 4 * MiB), a(g2, 2 * MiB), *f(a2), a(tb, 5 * MiB), *f(tb), *f(a1), *f(cast),  # backward
               a(to, 1 * MiB), *f(to)]                                                            # optimizer
    phases = [("forward", 0), ("backward", 6), ("optimizer", 17)]
    tags = {w1: M.WEIGHTS, w2 + 128: M.WEIGHTS, adam: M.OPT_STATE, g1: M.GRADS, g2: M.GRADS}
    return snapshot, entries, phases, tags, [2 * 1024 * 1024]   # W1 has 1 Mi elements: 2 MiB in 16 bits


def test_live_blocks_walks_each_segment():
    snapshot, *_ = synthetic()
    live = M.live_blocks(snapshot)
    assert sorted(live.values()) == [1 * MiB, 2 * MiB, 4 * MiB, 12 * MiB] and 1018 * MiB not in live


def test_breakdown_finds_the_peak_and_what_holds_it():
    snapshot, entries, phases, tags, casts = synthetic()
    out = M.breakdown(entries, M.live_blocks(snapshot), phases, tags, casts)
    c = out["by_category"]
    assert out["peak_phase"] == "backward" and out["start_bytes"] == 19 * MiB
    assert out["peak_bytes"] == (19 + 2 + 8 + 4 + 2 + 5) * MiB == sum(c.values())
    assert (c[M.WEIGHTS], c[M.OPT_STATE], c[M.GRADS]) == (6 * MiB, 12 * MiB, 6 * MiB)
    assert (c[M.CAST], c[M.ACTIVATIONS], c["backward temporaries"], c[M.OTHER]) == (2 * MiB, 8 * MiB, 5 * MiB, MiB)
    assert c["optimizer temporaries"] == 0


def test_without_autocast_the_copy_counts_as_an_activation():
    snapshot, entries, phases, tags, _ = synthetic()
    c = M.breakdown(entries, M.live_blocks(snapshot), phases, tags, [])["by_category"]
    assert c[M.CAST] == 0 and c[M.ACTIVATIONS] == 10 * MiB


def test_a_log_with_only_free_requested_still_frees():
    snapshot, entries, phases, tags, casts = synthetic()
    requested = [e for e in entries if e["action"] != "free_completed"]
    out = M.breakdown(requested, M.live_blocks(snapshot), phases, tags, casts)
    assert out["peak_bytes"] == 40 * MiB


def test_bad_phases_are_refused():
    snapshot, entries, _, tags, casts = synthetic()
    with pytest.raises(ValueError, match="phases"):
        M.breakdown(entries, {}, [("backward", 6), ("forward", 0)], tags, casts)


def test_step_memory_needs_a_gpu():
    from course_kit.amp.snapshot import step_memory
    from course_kit.models import tiny_gpt
    model = tiny_gpt.TinyGPT.from_preset("smoke", seed=0)
    with pytest.raises(RuntimeError, match="CUDA GPU"):
        step_memory(model, torch.zeros(2, 8, dtype=torch.long), "bf16")


@pytest.mark.gpu
def test_step_memory_on_a_gpu_adds_up_to_the_allocators_peak():
    from course_kit.amp.snapshot import step_memory
    from course_kit.models import tiny_gpt
    cfg = tiny_gpt.config("cpu")
    model = tiny_gpt.TinyGPT.from_preset("cpu", seed=0, device="cuda")
    tokens = tiny_gpt.batches(tiny_gpt.markov_tokens(cfg.vocab, 20 * cfg.seq_len, seed=0), 8, cfg.seq_len, 1,
                              seed=0, device="cuda")[0]
    fp32, bf16 = step_memory(model, tokens, "fp32"), step_memory(model, tokens, "bf16")
    n_bytes = sum(p.numel() * 4 for p in model.parameters())
    for out in (fp32, bf16):
        assert sum(out["by_category"].values()) == out["peak_bytes"]
        assert out["by_category"][M.WEIGHTS] >= n_bytes and out["by_category"][M.OPT_STATE] >= 2 * n_bytes
    assert fp32["by_category"][M.CAST] == 0 < bf16["by_category"][M.CAST]
    assert bf16["by_category"][M.ACTIVATIONS] < fp32["by_category"][M.ACTIVATIONS]


def test_memory_breakdown_figure_stacks_the_categories():
    from course_kit.plots import amp as amp_plots
    snapshot, entries, phases, tags, casts = synthetic()
    mb = M.breakdown(entries, M.live_blocks(snapshot), phases, tags, casts)
    fig = amp_plots.memory_breakdown([{"name": "bf16", "memory_breakdown": mb}, {"name": "fp32"}])
    assert {t.name for t in fig.data} == {M.WEIGHTS, M.GRADS, M.OPT_STATE, M.CAST, M.ACTIVATIONS,
                                          "backward temporaries", M.OTHER}
    assert abs(sum(t.y[0] for t in fig.data) - 40 / 1024) < 1e-9
