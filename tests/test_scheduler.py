"""Scheduler policies without a model: fake tokens drive postprocess()."""
import random

import pytest

from course_kit.engine.block_manager import BlockManager
from course_kit.engine.config import EngineConfig
from course_kit.engine.scheduler import Scheduler, admit
from course_kit.engine.sequence import SamplingParams, Sequence, Status


def make(rid, n_prompt, n_out, arrival=0.0):
    return Sequence(rid, list(range(3, 3 + n_prompt)), SamplingParams(max_new_tokens=n_out), arrival=arrival)


def run(sched, seqs, more_coming=False, max_steps=10_000, check=None):
    """Drive a scheduler to completion with token 1 for every sample; return the step outputs."""
    for s in seqs:
        sched.add(s)
    steps = []
    t = 0.0
    while sched.has_unfinished():
        out = sched.schedule(t, more_coming)
        steps.append(out)
        sched.postprocess(out, [1 if s.sample else None for s in out.scheduled], t)
        sched.blocks.check_invariants()
        if check:
            check(sched, out)
        t += 1.0
        assert len(steps) < max_steps, "scheduler made no progress"
    return steps


def test_admit_rule():
    # FCFS, stop at the first that does not fit (no skipping ahead)
    assert admit([10, 10, 10], free_blocks=5, block_size=4, free_slots=8, token_budget=100) == [10]
    assert admit([4, 4, 4], free_blocks=10, block_size=4, free_slots=2, token_budget=100) == [4, 4]
    # chunked prefill: the last admitted request gets what is left of the budget
    assert admit([6, 20, 5], free_blocks=100, block_size=4, free_slots=8, token_budget=16) == [6, 10]
    assert admit([30, 1], free_blocks=3, block_size=16, free_slots=8, token_budget=64) == [30, 1]
    assert admit([], free_blocks=3, block_size=16, free_slots=8, token_budget=64) == []
    assert admit([3], free_blocks=3, block_size=16, free_slots=8, token_budget=0) == []
    # one token past a block boundary takes a whole new block; exactly on it does not
    assert admit([9], free_blocks=2, block_size=4, free_slots=8, token_budget=100) == []
    assert admit([9], free_blocks=3, block_size=4, free_slots=8, token_budget=100) == [9]
    assert admit([8], free_blocks=2, block_size=4, free_slots=8, token_budget=100) == [8]
    assert admit([8, 1], free_blocks=3, block_size=4, free_slots=8, token_budget=100) == [8, 1]
    assert admit([8, 5], free_blocks=3, block_size=4, free_slots=8, token_budget=100) == [8]


def test_admit_with_prefix_hits():
    # (cached tokens, cached blocks held by running requests) per waiting request
    assert admit([9], 1, 4, 8, 100, prefix_hits=[(8, 2)]) == [1]       # only the private last block
    assert admit([9], 1, 4, 8, 100, prefix_hits=[(8, 1)]) == []        # a free-listed hit costs a block
    assert admit([9], 2, 4, 8, 100, prefix_hits=[(8, 1)]) == [1]
    assert admit([9, 12], 3, 4, 8, 5, prefix_hits=[(8, 2), (4, 1)]) == [1, 4]
    # both are read one request at a time, and never past the first that does not fit
    read = []

    def hits():
        for h in [(0, 0), (0, 0), (0, 0), (0, 0)]:
            read.append(h)
            yield h
    assert admit(iter([4, 20, 4, 4]), 3, 4, 8, 100, prefix_hits=hits()) == [4]
    assert len(read) == 2


def test_prefix_hits_taken_by_one_admission_are_free_for_the_next():
    # two requests hit the same cached blocks, which nobody holds: the first takes them off the
    # free list, so the second needs one block, and both fit in four
    bm = BlockManager(4, 4, prefix_caching=True)
    done = Sequence("done", list(range(1, 10)), SamplingParams(max_new_tokens=1))
    bm.allocate(done, 9)
    done.num_computed = 9
    bm.commit(done)
    bm.free(done)
    sched = Scheduler(EngineConfig(policy="continuous", max_num_seqs=4, max_num_batched_tokens=16), bm)
    for rid, last in (("b", 20), ("c", 21)):
        sched.add(Sequence(rid, list(range(1, 9)) + [last], SamplingParams(max_new_tokens=2)))
    out = sched.schedule(0.0)
    assert [(s.seq.request_id, s.num_tokens, s.sample) for s in out.scheduled] == [("b", 1, True), ("c", 1, True)]
    assert bm.num_free_blocks == 0 and bm.prefix_hits == 4
    bm.check_invariants()


def test_continuous_respects_budget_slots_and_finishes_all():
    bm = BlockManager(64, 4)
    sched = Scheduler(EngineConfig(policy="continuous", max_num_seqs=3, max_num_batched_tokens=8), bm)
    seqs = [make(f"r{i}", n, o) for i, (n, o) in enumerate([(5, 3), (12, 6), (2, 9), (7, 1), (20, 4)])]

    def check(s, out):
        assert out.num_tokens <= 8
        assert len(s.running) <= 3
        assert len({x.seq.slot for x in out.scheduled}) == len(out.scheduled)
    steps = run(sched, seqs, check=check)
    assert all(s.finished and len(s.output) == s.params.max_new_tokens for s in seqs)
    assert any(not x.sample for st in steps for x in st.scheduled), "no prefill was chunked"
    assert bm.num_free_blocks == 64


def test_static_waits_for_a_full_batch_and_pads_finished_members():
    bm = BlockManager(64, 4)
    sched = Scheduler(EngineConfig(policy="static", max_num_seqs=2), bm)
    a, b = make("a", 3, 2), make("b", 5, 6)
    sched.add(a)
    assert sched.schedule(0.0, more_coming=True).empty          # waits for a second request
    sched.add(b)
    first = sched.schedule(0.0, more_coming=True)
    assert [x.num_tokens for x in first.scheduled] == [3, 5]
    assert first.padding_tokens == 2                               # padded to the longest prompt
    sched.postprocess(first, [1, 1], 0.0)
    pads = []
    while sched.has_unfinished():
        out = sched.schedule(1.0)
        pads.append(out.num_padding_rows)
        sched.postprocess(out, [1] * len(out.scheduled), 1.0)
    assert pads == [0, 1, 1, 1, 1]                                 # a finished; its row rides along
    assert bm.num_free_blocks == 64


def test_dynamic_leaves_after_max_wait():
    bm = BlockManager(64, 4)
    sched = Scheduler(EngineConfig(policy="dynamic", max_num_seqs=4, max_wait_s=0.5), bm)
    sched.add(make("a", 3, 2, arrival=0.0))
    assert sched.schedule(0.2, more_coming=True).empty
    out = sched.schedule(0.6, more_coming=True)
    assert [x.seq.request_id for x in out.scheduled] == ["a"]


def test_preemption_frees_blocks_and_everything_finishes():
    bm = BlockManager(12, 4)                                       # 48 slots for ~100 tokens of demand
    sched = Scheduler(EngineConfig(policy="continuous", max_num_seqs=4, max_num_batched_tokens=16), bm)
    rng = random.Random(0)
    seqs = [make(f"r{i}", rng.randint(2, 10), rng.randint(5, 20)) for i in range(10)]
    run(sched, seqs)
    assert sched.num_preemptions > 0
    assert all(s.finished and len(s.output) == s.params.max_new_tokens for s in seqs)
    assert bm.num_free_blocks == 12 and not bm.tables


def test_abort_frees_blocks():
    bm = BlockManager(16, 4)
    sched = Scheduler(EngineConfig(policy="continuous", max_num_seqs=4, max_num_batched_tokens=32), bm)
    a, b = make("a", 9, 50), make("b", 4, 50)
    sched.add(a)
    sched.add(b)
    out = sched.schedule(0.0)
    sched.postprocess(out, [1, 1], 0.0)
    assert bm.num_used_blocks == 3 + 1
    assert sched.abort("a", 1.0) is a and a.status is Status.FINISHED and a.finish_reason == "abort"
    assert bm.num_used_blocks == 1
    bm.check_invariants()
    assert sched.abort("nope", 1.0) is None


def test_bad_settings_are_explained():
    bm = BlockManager(4, 4)
    with pytest.raises(ValueError, match="policy='greedy'"):
        Scheduler(EngineConfig(policy="greedy"), bm)
    with pytest.raises(ValueError, match="max_num_batched_tokens=4 must be >= max_num_seqs=8"):
        Scheduler(EngineConfig(policy="continuous", max_num_seqs=8, max_num_batched_tokens=4), bm)
    sched = Scheduler(EngineConfig(policy="continuous", max_num_seqs=2, max_num_batched_tokens=8), bm)
    with pytest.raises(ValueError, match="more than the 16"):
        sched.add(make("big", 10, 10))


def test_postprocess_refuses_tokens_that_do_not_match_the_schedule():
    sched = Scheduler(EngineConfig(policy="continuous", max_num_seqs=2, max_num_batched_tokens=8),
                      BlockManager(16, 4))
    sched.add(make("a", 5, 3))
    sched.add(make("b", 6, 3))
    out = sched.schedule(0.0)
    assert [(s.num_tokens, s.sample) for s in out.scheduled] == [(5, True), (3, False)]
    with pytest.raises(ValueError, match="2 scheduled"):
        sched.postprocess(out, [1], 0.0)
    with pytest.raises(ValueError, match="'a' samples"):
        sched.postprocess(out, [None, 1], 0.0)


def test_static_batch_holds_finished_members_caches_until_it_ends():
    """A finished member of a static batch rides along as a padding row that still attends over
    its cache (as padded generate computes it), so the batch keeps its blocks until the last
    member is done, then frees them all."""
    bm = BlockManager(num_blocks=16, block_size=4)
    sched = Scheduler(EngineConfig(policy="static", max_num_seqs=2), bm)
    short, long_ = make("a", 3, 1), make("b", 3, 3)
    sched.add(short)
    sched.add(long_)
    out = sched.schedule(0.0)
    sched.postprocess(out, [7, 7], 0.0)                  # prefill: "a" is done after one token
    assert short.status is Status.FINISHED and "a" in bm.tables
    out = sched.schedule(0.1)
    assert out.padding == [short] and out.num_padding_rows == 1
    sched.postprocess(out, [7], 0.1)
    out = sched.schedule(0.2)
    sched.postprocess(out, [7], 0.2)                     # "b" done: the batch ends
    assert long_.status is Status.FINISHED
    assert bm.tables == {} and bm.num_used_blocks == 0
    bm.check_invariants()
