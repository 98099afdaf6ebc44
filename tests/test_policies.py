"""Policies pinned to fixed expectations, so that a plausible change of rule fails a test.

Each test below kills one mutation that once survived the whole suite (issue 39): the order freed
blocks are reused in, which request is preempted, admission in a step that preempted, top-p at a
tie, temperature before top-p, the interleaved bubble, the engine's capacity, the "lost
precision" threshold, and a prefix-cache hash collision. Expectations are worked out by hand in
the comments, or come from an outside oracle (HF transformers' logits warpers, the paper).
"""
from __future__ import annotations

import pytest
import torch

from course_kit.dtypes import get_format, ops
from course_kit.engine import block_manager as bm_module
from course_kit.engine.block_manager import BlockManager
from course_kit.engine.config import EngineConfig
from course_kit.engine.scheduler import Scheduler
from course_kit.engine.sequence import SamplingParams, Sequence
from course_kit.models import sampling
from course_kit.parallel import schedules


def seq(rid: str, prompt: list[int] | int, new: int = 4) -> Sequence:
    tokens = list(range(3, 3 + prompt)) if isinstance(prompt, int) else prompt
    return Sequence(rid, tokens, SamplingParams(max_new_tokens=new))


# ----------------------------------------------------------------------------- the block manager

def test_freed_blocks_are_reused_last_block_first():
    """A request's blocks go back to the free list in reverse, so its first blocks (the ones a
    prefix is likeliest to share) are handed out again last. 4 blocks; A takes 0, 1, 2; after A
    frees, the free list is 3 (never taken), then 2, 1, 0: a 4-block request gets [3, 2, 1, 0].
    (Freed in table order it would get [3, 0, 1, 2].)"""
    blocks = BlockManager(num_blocks=4, block_size=2)
    a = seq("a", 6)
    blocks.allocate(a, 6)
    assert blocks.block_table("a") == [0, 1, 2]
    blocks.free(a)
    b = seq("b", 8)
    blocks.allocate(b, 8)
    assert blocks.block_table("b") == [3, 2, 1, 0]


def _committed(blocks: BlockManager, rid: str, tokens: list[int]) -> Sequence:
    s = seq(rid, tokens)
    blocks.allocate(s, len(tokens))
    s.num_computed = len(tokens)
    blocks.commit(s)
    return s


def test_a_shared_prefix_is_a_hit():
    blocks = BlockManager(num_blocks=8, block_size=2, prefix_caching=True)
    _committed(blocks, "first", [5, 6, 7, 8, 9])
    assert blocks.cached_prefix(seq("same", [5, 6, 7, 8, 1])) == (4, 2)   # 4 tokens in 2 held blocks
    assert blocks.cached_prefix(seq("half", [5, 6, 1, 2, 3])) == (2, 1)


def test_a_hash_collision_never_shares_another_prefix(monkeypatch):
    """Two different prompts whose block hashes collide (forced: every block hashes to 42) must not
    share K/V: a hit is taken only when the cached block holds the very tokens asked for."""
    monkeypatch.setattr(bm_module, "block_hash", lambda previous, tokens: 42)
    blocks = BlockManager(num_blocks=8, block_size=2, prefix_caching=True)
    first = _committed(blocks, "first", [5, 6, 7, 8, 9])
    other = seq("other", [1, 2, 3, 4, 1])
    assert blocks.cached_prefix(other) == (0, 0)
    assert blocks.allocate(other, 5) == 0
    assert not set(blocks.block_table("other")) & set(blocks.block_table(first.request_id))
    assert blocks.cached_prefix(seq("same", [5, 6, 1, 2, 3])) == (2, 1)    # its own first block still hits


# ----------------------------------------------------------------------------- the scheduler

def _continuous(num_blocks: int, block_size: int, max_num_seqs: int, tokens: int) -> Scheduler:
    cfg = EngineConfig(policy="continuous", block_size=block_size, num_blocks=num_blocks,
                       max_num_seqs=max_num_seqs, max_num_batched_tokens=tokens).resolved(10**6)
    return Scheduler(cfg, BlockManager(cfg.num_blocks, cfg.block_size))


def _step(sched: Scheduler, t: float):
    out = sched.schedule(t)
    sched.postprocess(out, [1 if s.sample else None for s in out.scheduled], t)
    return out


def test_the_newest_request_is_preempted():
    """5 blocks of 4 slots, 2 slots, 4 tokens a step. r0 (7 prompt + 7 new) and r1 (1 + 7) both
    decode; at step 7 r0 needs its fourth block and r1 its second: only one is free. The newest,
    r1, is preempted (its recomputation is the cheapest), and r0 goes on."""
    sched = _continuous(num_blocks=5, block_size=4, max_num_seqs=2, tokens=4)
    sched.add(seq("r0", 7, 7))
    sched.add(seq("r1", 1, 7))
    outs = [_step(sched, float(t)) for t in range(8)]
    assert all(not o.preempted for o in outs[:7])
    assert [s.request_id for s in outs[7].preempted] == ["r1"]
    assert [(s.seq.request_id, s.num_tokens) for s in outs[7].scheduled] == [("r0", 1)]


def test_a_step_that_preempted_admits_nobody(monkeypatch):
    """Memory is short in a step that preempted, so the waiting queue is not read at all that
    step. (The victim goes back to the front of the queue, so first-come-first-served would
    refuse everyone anyway today; this pins the rule itself, for the day that changes.)"""
    sched = _continuous(num_blocks=5, block_size=4, max_num_seqs=3, tokens=4)
    sched.add(seq("r0", 7, 7))
    sched.add(seq("r1", 1, 7))
    admitted_in = []
    real_admit = Scheduler._admit

    def spy(self, out, budget):
        admitted_in.append(t)
        return real_admit(self, out, budget)

    monkeypatch.setattr(Scheduler, "_admit", spy)
    for t in range(8):
        out = _step(sched, float(t))
        if t == 6:
            sched.add(seq("r2", 1, 1))      # waiting, with a free slot, when r1 is preempted
    assert [s.request_id for s in out.preempted] == ["r1"]
    assert 7 not in admitted_in and all(s.seq.request_id == "r0" for s in out.scheduled)


def test_capacity_is_inclusive():
    """A request of exactly the engine's capacity fits; one token more does not. 3 blocks of 4
    slots, max_model_len 10: capacity 10."""
    cfg = EngineConfig(policy="continuous", block_size=4, num_blocks=3, max_num_seqs=2,
                       max_num_batched_tokens=8, max_model_len=10).resolved(64)
    sched = Scheduler(cfg, BlockManager(cfg.num_blocks, cfg.block_size))
    assert sched.capacity() == 10
    sched.add(seq("fits", 6, 4))
    with pytest.raises(ValueError, match="more than the 10"):
        sched.add(seq("over", 6, 5))


# ----------------------------------------------------------------------------- sampling, against HF

def _hf_warped(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    from transformers.generation.logits_process import (LogitsProcessorList, TemperatureLogitsWarper,
                                                        TopKLogitsWarper, TopPLogitsWarper)
    warpers = LogitsProcessorList([TemperatureLogitsWarper(temperature)]
                                  + ([TopKLogitsWarper(top_k)] if top_k else [])
                                  + ([TopPLogitsWarper(top_p)] if top_p < 1.0 else []))
    return warpers(torch.zeros(logits.shape[0], 1, dtype=torch.long), logits.clone())


def test_top_p_keeps_a_token_whose_mass_above_is_exactly_top_p_out():
    """Four equal logits: each token holds exactly 1/4. At top_p = 0.5 the smallest set with at
    least half the mass is two tokens (HF keeps two); the third has exactly 0.5 above it and goes."""
    logits = torch.zeros(1, 4)
    kept = torch.isfinite(sampling.warp(logits, 1.0, top_p=0.5))
    assert int(kept.sum()) == 2 == int(torch.isfinite(_hf_warped(logits, 1.0, 0, 0.5)).sum())


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.5])
@pytest.mark.parametrize("top_k,top_p", [(0, 0.6), (0, 0.9), (5, 0.8)])
def test_warp_is_hfs_temperature_then_top_k_then_top_p(temperature, top_k, top_p):
    """Temperature first: a hotter distribution spreads its mass, so top-p keeps more tokens."""
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(7)) * 3
    ours, hf = sampling.warp(logits, temperature, top_k, top_p), _hf_warped(logits, temperature, top_k, top_p)
    assert torch.equal(torch.isfinite(ours), torch.isfinite(hf))
    finite = torch.isfinite(hf)
    assert torch.allclose(ours[finite], hf[finite])


def test_a_hotter_sample_keeps_more_tokens_at_the_same_top_p():
    logits = torch.randn(1, 50, generator=torch.Generator().manual_seed(3)) * 3
    kept = [int(torch.isfinite(sampling.warp(logits, t, top_p=0.8)).sum()) for t in (0.5, 1.0, 2.0)]
    assert kept[0] < kept[1] < kept[2]


# ----------------------------------------------------------------------------- published formulas

def test_interleaving_divides_the_bubble_by_v():
    """Narayanan et al. (2021), section 2.2: with v model chunks per device the bubble is
    (p - 1) / v microbatch-times against m of work; as a fraction of the whole step,
    (p - 1) / (v m + p - 1). p = 4, m = 8: GPipe 3/11, v = 2: 3/19, v = 4: 3/35."""
    assert schedules.bubble_theory(4, 8) == pytest.approx(3 / 11)
    assert schedules.bubble_theory(4, 8, 2) == pytest.approx(3 / 19)
    assert schedules.bubble_theory(4, 8, 4) == pytest.approx(3 / 35)


def test_precision_is_lost_past_four_epsilon():
    """One rounding costs at most eps/2, so a result within 4 eps of float64 is 'ok'. 300 ones
    summed in bf16 end about 19 eps off (the sum passes 256, where bf16's step is 2): 'lost'."""
    eps = get_format("bf16").eps
    lost = ops.evaluate("sum", 1.0, "bf16", n=300)
    assert 4 * eps < lost.rel_error < 40 * eps and lost.outcome == "lost precision"
    assert ops.evaluate("sum", 1.0, "bf16", n=200).outcome == "ok"
