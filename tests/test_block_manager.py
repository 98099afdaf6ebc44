"""Block manager: allocation, freeing, prefix sharing with reference counts, invariants."""
import random

import pytest

from course_kit.engine.block_manager import BlockManager
from course_kit.engine.sequence import SamplingParams, Sequence


def seq(rid, n_or_tokens):
    toks = list(range(1, n_or_tokens + 1)) if isinstance(n_or_tokens, int) else n_or_tokens
    return Sequence(rid, toks, SamplingParams(max_new_tokens=4))


def test_allocate_grow_free_and_slots():
    bm = BlockManager(8, 4)
    a = seq("a", 6)
    assert bm.blocks_needed(a, 6) == 2
    assert bm.allocate(a, 6) == 0
    assert len(bm.block_table("a")) == 2 and bm.num_free_blocks == 6
    t = bm.block_table("a")
    assert bm.slot("a", 5) == t[1] * 4 + 1
    bm.grow(a, 9)
    assert len(bm.block_table("a")) == 3
    bm.check_invariants()
    bm.free(a)
    assert bm.num_free_blocks == 8 and not bm.tables
    bm.check_invariants()


def test_out_of_blocks_is_refused():
    bm = BlockManager(3, 4)
    a, b = seq("a", 8), seq("b", 8)
    bm.allocate(a, 8)
    assert not bm.can_allocate(b, 8)
    with pytest.raises(RuntimeError, match="needs 2 blocks, only 1 free"):
        bm.allocate(b, 8)
    with pytest.raises(ValueError, match="already holds blocks"):
        bm.allocate(a, 4)
    with pytest.raises(ValueError, match="num_blocks=0"):
        BlockManager(0, 4)


def test_prefix_sharing_reference_counts():
    bm = BlockManager(10, 4, prefix_caching=True)
    prefix = [7, 8, 9, 10, 11, 12, 13, 14]               # two full blocks
    a = seq("a", prefix + [1, 2, 3])
    bm.allocate(a, a.num_tokens)
    a.num_computed = a.num_tokens
    bm.commit(a)                                           # a's full blocks are now named
    b = seq("b", prefix + [5, 6])
    assert bm.blocks_needed(b, b.num_tokens) == 1          # only the private last block
    assert bm.allocate(b, b.num_tokens) == 8               # 8 tokens already in the cache
    assert bm.block_table("b")[:2] == bm.block_table("a")[:2]
    assert [bm.ref_count[x] for x in bm.block_table("b")[:2]] == [2, 2]
    bm.check_invariants()
    bm.free(a)
    assert [bm.ref_count[x] for x in bm.block_table("b")[:2]] == [1, 1]
    bm.free(b)
    bm.check_invariants()
    # freed blocks keep their names: a third request still hits them
    c = seq("c", prefix + [4])
    assert bm.allocate(c, c.num_tokens) == 8
    bm.check_invariants()


def test_prefix_hit_never_covers_the_last_token():
    bm = BlockManager(10, 4, prefix_caching=True)
    a = seq("a", 8)
    bm.allocate(a, 8)
    a.num_computed = 8
    bm.commit(a)
    b = seq("b", 8)                    # identical prompt: its last token must still be computed
    assert bm.allocate(b, 8) == 4
    bm.check_invariants()


def test_prompts_differing_only_in_a_blocks_last_token_do_not_share_it():
    # a block's name must cover every one of its tokens, the last one included
    bm = BlockManager(10, 4, prefix_caching=True)
    a = seq("a", [1, 2, 3, 4, 5, 6, 7, 8, 9])              # blocks [1 2 3 4] [5 6 7 8] [9]
    bm.allocate(a, 9)
    a.num_computed = 9
    bm.commit(a)
    b = seq("b", [1, 2, 3, 99, 5, 6, 7, 8, 9])             # differs in the last token of block 0
    assert bm.cached_prefix(b) == (0, 0)
    assert bm.allocate(b, 9) == 0                          # nothing reused, not 8 tokens
    assert not set(bm.block_table("a")) & set(bm.block_table("b"))
    c = seq("c", [1, 2, 3, 4, 5, 6, 7, 99, 9])             # differs in the last token of block 1
    assert bm.cached_prefix(c) == (4, 1)                   # block 0 only, which a holds
    assert bm.allocate(c, 9) == 4
    assert bm.block_table("c")[0] == bm.block_table("a")[0]
    assert bm.block_table("c")[1] != bm.block_table("a")[1]
    bm.check_invariants()


def test_invariant_checker_catches_double_ownership_and_leaks():
    bm = BlockManager(6, 2)
    a, b = seq("a", 4), seq("b", 4)
    bm.allocate(a, 4)
    bm.allocate(b, 4)
    bm.tables["b"][0] = bm.tables["a"][0]                # the same block in two tables
    with pytest.raises(AssertionError, match="block"):
        bm.check_invariants()
    bm2 = BlockManager(6, 2)
    bm2.allocate(a, 4)
    bm2.tables.pop("a")                                   # blocks held by nobody, not free: leak
    with pytest.raises(AssertionError, match="leak"):
        bm2.check_invariants()


@pytest.mark.parametrize("prefix_caching", [False, True])
def test_random_workload_keeps_invariants(prefix_caching):
    rng = random.Random(0)
    bm = BlockManager(24, 4, prefix_caching=prefix_caching)
    live: list[Sequence] = []
    shared = [rng.randrange(100) for _ in range(8)]
    for i in range(400):
        op = rng.random()
        if op < 0.4:
            toks = (shared if rng.random() < 0.5 else []) + [rng.randrange(100) for _ in range(rng.randint(1, 12))]
            s = seq(f"s{i}", toks)
            if bm.can_allocate(s, s.num_tokens):
                s.num_computed = bm.allocate(s, s.num_tokens)
                live.append(s)
        elif op < 0.75 and live:
            s = rng.choice(live)
            s.num_computed = s.num_tokens
            bm.commit(s)
            s.output.append(rng.randrange(100))
            if bm.blocks_needed(s, s.num_tokens) <= bm.num_free_blocks:
                bm.grow(s, s.num_tokens)
            else:
                bm.free(s)
                live.remove(s)
        elif live:
            s = live.pop(rng.randrange(len(live)))
            bm.free(s)
        bm.check_invariants()
    for s in live:
        bm.free(s)
    bm.check_invariants()
    assert bm.num_free_blocks == 24


def test_table_array_follows_the_table_through_growth_and_reallocation():
    """The cached int32 copy the model runner reads must never go stale: it follows growth, and a
    request freed (preempted) and allocated again gets its new blocks, even at the same length."""
    bm = BlockManager(8, 4)
    a, b = seq("a", 6), seq("b", 6)
    bm.allocate(a, 6)
    assert bm.table_array("a").tolist() == bm.tables["a"]
    bm.grow(a, 12)
    assert bm.table_array("a").tolist() == bm.tables["a"] and len(bm.tables["a"]) == 3
    first = bm.tables["a"]
    bm.free(a)
    bm.allocate(b, 8)                 # b takes blocks a just freed
    bm.allocate(a, 12)                # same length as before, other blocks
    assert bm.tables["a"] != first
    assert bm.table_array("a").tolist() == bm.tables["a"]
    assert str(bm.table_array("a").dtype) == "int32"
