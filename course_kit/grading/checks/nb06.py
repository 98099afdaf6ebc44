"""Checks for notebook 06 (batching): prefix-aware admission, and the step of the first preemption.

- 06.prefix_admit: the learner's rule sees the waiting prompts and the cached prefix blocks as data;
  each case is a real BlockManager state (running requests holding blocks, finished ones whose blocks
  are free but still cached), and the oracle is the engine itself: `scheduler.admit(...,
  prefix_hits=...)` fed the block manager's own hits, one admitted request at a time, as the
  scheduler's `_admit` does.
- 06.first_preempt: predict, then measure with the engine, the step at which a given workload first
  preempts with a given number of KV blocks, and which request it preempts.
"""
from __future__ import annotations

import random
from typing import Any

from course_kit import grading
from course_kit.engine.block_manager import BlockManager
from course_kit.engine.scheduler import admit
from course_kit.engine.sequence import SamplingParams, Sequence
from course_kit.grading.checks import feedback

# ---- 06.prefix_admit ----------------------------------------------------------------------------


def _seq(name: str, tokens: list[int]) -> Sequence:
    return Sequence(name, list(tokens), SamplingParams())


def build_state(spec: dict) -> BlockManager:
    """A block manager as the engine leaves it: running requests computed and holding their blocks,
    finished ones freed (their full blocks stay cached), fillers holding blocks of unrelated tokens."""
    bm = BlockManager(spec["num_blocks"], spec["block_size"], prefix_caching=True)
    done = []
    for i, tokens in enumerate(spec["running"] + spec["finished"]):
        seq = _seq(f"r{i}", tokens)
        bm.allocate(seq, seq.num_tokens)
        seq.num_computed = seq.num_tokens
        bm.commit(seq)
        if i >= len(spec["running"]):
            done.append(seq)
    for i in range(spec["fillers"]):
        bm.allocate(_seq(f"f{i}", [0] * spec["block_size"]), spec["block_size"])
    for seq in done:
        bm.free(seq)
    return bm


def cached_blocks(bm: BlockManager, spec: dict) -> list[tuple[list[int], bool]]:
    """The learner's view of the cache: every full-block prefix of a running or finished prompt that
    the block manager can hit, with whether a running request holds its last block."""
    bs, out, seen = bm.block_size, [], set()
    for tokens in spec["running"] + spec["finished"]:
        for end in range(bs, len(tokens) + 1, bs):
            prefix = tuple(tokens[:end])
            if prefix in seen:
                continue
            seen.add(prefix)
            cached, held = bm.cached_prefix(_seq("probe", list(prefix) + [0]))
            if cached != end:
                continue
            _, held_before = bm.cached_prefix(_seq("probe", list(prefix[:-bs]) + [0])) if end > bs else (0, 0)
            out.append((list(prefix), held > held_before))
    return out


def engine_admit(spec: dict) -> list[int]:
    """The oracle: the engine's admit, with the block manager's hits read one request at a time and
    each admitted request taking its blocks before the next one's hits are looked up."""
    bm = build_state(spec)
    waiting = [_seq(f"w{i}", p) for i, p in enumerate(spec["waiting"])]

    def hits():
        prev = None
        for seq in waiting:
            if prev is not None:
                bm.allocate(prev, prev.num_tokens)
            yield bm.cached_prefix(seq)
            prev = seq
    return admit([len(p) for p in spec["waiting"]], bm.num_free_blocks, bm.block_size,
                 spec["free_slots"], spec["budget"], hits())


def case_of(spec: dict) -> tuple:
    bm = build_state(spec)
    cached = cached_blocks(bm, spec)
    random.Random(len(cached)).shuffle(cached)        # the order of the list carries nothing
    return ([list(p) for p in spec["waiting"]], cached, bm.block_size, bm.num_free_blocks,
            spec["free_slots"], spec["budget"])


def _model_admit(waiting, cached, block_size, free_blocks, free_slots, token_budget) -> list[int]:
    """The rule as the task states it (no block manager): used only to keep the generated cases
    where the two agree, i.e. where no cached block was handed out as a new one during the step."""
    known = {tuple(p): held for p, held in cached}
    chunks = []
    for tokens in waiting:
        hits = []
        for end in range(block_size, len(tokens), block_size):    # never the block of the last token
            if tuple(tokens[:end]) not in known:
                break
            hits.append(tuple(tokens[:end]))
        held = sum(known[h] for h in hits)
        blocks = -(-len(tokens) // block_size) - held
        if free_slots == 0 or token_budget == 0 or blocks > free_blocks:
            break
        chunk = min(len(tokens) - len(hits) * block_size, token_budget)
        chunks.append(chunk)
        for h in hits:
            known[h] = True
        free_slots, free_blocks, token_budget = free_slots - 1, free_blocks - blocks, token_budget - chunk
    return chunks


def _random_spec(rng: random.Random) -> dict:
    bs = rng.choice([2, 4, 8])
    vocab = range(1, 30)
    words = lambda n: [rng.choice(vocab) for _ in range(n)]              # noqa: E731
    system = words(bs * rng.randint(1, 3))
    other = words(bs * rng.randint(1, 2))
    running = [system + words(rng.randint(1, 3 * bs)) for _ in range(rng.randint(0, 2))]
    finished = [rng.choice([system, other]) + words(rng.randint(0, 3 * bs)) for _ in range(rng.randint(0, 3))]
    waiting = []
    for _ in range(rng.randint(0, 5)):
        kind = rng.random()
        if kind < 0.35 and (running or finished):
            base = rng.choice(running + finished)
            waiting.append(base[:rng.randint(1, len(base))] + words(rng.randint(0, 2 * bs)))
        elif kind < 0.7:
            waiting.append(rng.choice([system, other]) + words(rng.randint(0, 3 * bs)))
        else:
            waiting.append(words(rng.randint(1, 4 * bs)))
    used = sum(-(-len(t) // bs) for t in running + finished)
    spare = rng.randint(0, 12)
    return {"block_size": bs, "num_blocks": max(1, used + spare + rng.randint(0, 4)), "running": running,
            "finished": finished, "fillers": 0, "waiting": waiting,
            "free_slots": rng.randint(0, 5), "budget": rng.choice([0, 3, 8, 16, 64, 200])}


S8 = list(range(1, 9))                  # a system prompt of two blocks of 4
NAMED = [
    ("nothing cached", {"block_size": 4, "num_blocks": 8, "running": [], "finished": [], "fillers": 0,
                        "waiting": [[1, 2, 3, 4, 5], [6, 7]], "free_slots": 4, "budget": 64}),
    ("a prefix held by a running request costs no block",
     {"block_size": 4, "num_blocks": 6, "running": [S8 + [20]], "finished": [], "fillers": 0,
      "waiting": [S8 + [30, 31, 32, 33, 34]], "free_slots": 2, "budget": 64}),
    ("a cached prefix nobody holds still costs a free block",
     {"block_size": 4, "num_blocks": 4, "running": [], "finished": [S8 + [20]], "fillers": 1,
      "waiting": [S8 + [30, 31, 32, 33, 34]], "free_slots": 2, "budget": 64}),
    ("the whole prompt is cached: its last block is computed again",
     {"block_size": 4, "num_blocks": 8, "running": [S8], "finished": [], "fillers": 0,
      "waiting": [list(S8)], "free_slots": 2, "budget": 64}),
    ("a hit stops at the first block that differs",
     {"block_size": 4, "num_blocks": 10, "running": [S8 + [9, 10, 11, 12, 13]], "finished": [], "fillers": 0,
      "waiting": [[1, 2, 3, 4, 99, 6, 7, 8, 9, 10, 11, 12, 13]], "free_slots": 2, "budget": 64}),
    ("the same block after a different start is not a hit",
     {"block_size": 4, "num_blocks": 8, "running": [S8 + [20]], "finished": [], "fillers": 0,
      "waiting": [[77, 2, 3, 4, 5, 6, 7, 8, 30]], "free_slots": 2, "budget": 64}),
    ("cached blocks the first admitted request took are held for the second",
     {"block_size": 4, "num_blocks": 5, "running": [], "finished": [S8 + [20]], "fillers": 0,
      "waiting": [S8 + [30], S8 + [40, 41]], "free_slots": 3, "budget": 64}),
    ("two waiting requests share a prefix nobody computed yet",
     {"block_size": 4, "num_blocks": 7, "running": [], "finished": [], "fillers": 0,
      "waiting": [[50, 51, 52, 53, 54, 55, 56, 57, 58], [50, 51, 52, 53, 54, 55, 56, 57, 59]],
      "free_slots": 3, "budget": 64}),
    ("cached tokens need no budget",
     {"block_size": 4, "num_blocks": 9, "running": [S8 + S8], "finished": [], "fillers": 0,
      "waiting": [S8 + S8 + [40, 41], [60, 61, 62]], "free_slots": 3, "budget": 3}),
]


def specs(seed: int = 6, n: int = 60) -> list[tuple[str, dict]]:
    """The named cases, then seeded random ones (only those where no cached block is evicted)."""
    out = list(NAMED)
    rng = random.Random(seed)
    while len(out) < len(NAMED) + n:
        spec = _random_spec(rng)
        if _model_admit(*case_of(spec)) == engine_admit(spec):
            out.append(("a random case", spec))
    return out


def judge_prefix_admit(fn: Any, named: list[tuple[str, dict]]) -> None:
    for name, spec in named:
        args = case_of(spec)
        expected = engine_admit(spec)
        found = fn(*args)
        found = list(found) if isinstance(found, (list, tuple)) else found
        what = (f"prefix_admit on {len(args[0])} waiting prompts, {len(args[1])} cached blocks, block_size "
                f"{args[2]}, free_blocks {args[3]}, free_slots {args[4]}, token_budget {args[5]} ({name})")
        if not isinstance(found, list):
            raise grading.Wrong(f"{what}: expected a list of prefill chunks, found {feedback.describe(found)}")
        if len(found) != len(expected):
            raise grading.Wrong(f"{what}: {len(found)} requests admitted, which is not the engine's count",
                                expected=expected)
        bad = [i for i, (f, e) in enumerate(zip(found, expected)) if f != e]
        if bad:
            raise grading.Wrong(f"{what}: the prefill chunk of admitted request {bad[0]} is wrong "
                                f"(found {found[bad[0]]!r})", expected=expected)


def _cases() -> list[tuple]:
    return [case_of(spec) for _, spec in specs()]


PREFIX_HINT = """For each prompt, walk its full blocks from the start: block i is a hit while
tokens[:(i+1)*block_size] is a cached prefix; stop at the first miss, and never count the block that
holds the last token (its logits are needed). Hit tokens need no prefill; hit blocks a running request
holds need no free block (the others do). Once a request is admitted, the cached blocks it took are
held. The rest is the admission rule of the lesson."""


@grading.exercise("06.prefix_admit", cases=_cases, hint=PREFIX_HINT)
def prefix_admit(fn) -> None:
    """fn(waiting, cached, block_size, free_blocks, free_slots, token_budget) -> prefill chunks."""
    judge_prefix_admit(fn, specs())


# ---- 06.first_preempt ---------------------------------------------------------------------------

PREEMPT_WORKLOAD = {"prompt_lens": [24, 40, 16, 32, 8, 48], "new_tokens": [40, 24, 48, 32, 56, 16],
                    "options": {"policy": "continuous", "max_num_seqs": 4, "block_size": 8, "num_blocks": 24,
                                "max_num_batched_tokens": 64}}


def preempt_prompts(vocab_size: int) -> list[list[int]]:
    """The workload's prompts, as the notebook's exercise cell builds them."""
    import torch
    g = torch.Generator().manual_seed(6)
    return [torch.randint(1, vocab_size, (n,), generator=g).tolist() for n in PREEMPT_WORKLOAD["prompt_lens"]]


def first_preemption() -> tuple[int, int]:
    """(step number counting from 1, index of the preempted request), run with the course engine."""
    import torch

    from course_kit.engine import Engine
    from course_kit.models import llama
    threads = torch.get_num_threads()
    torch.set_num_threads(1)        # tiny steps: one thread avoids contention on a shared CPU
    try:
        model = llama.Transformer.from_preset("tiny", seed=0)
        eng = Engine(model, **PREEMPT_WORKLOAD["options"])
        seqs = [eng.add_request(p, SamplingParams(max_new_tokens=n, ignore_eos=True))
                for p, n in zip(preempt_prompts(model.config.vocab_size), PREEMPT_WORKLOAD["new_tokens"])]
        step = 0
        while eng.scheduler.num_preemptions == 0 and eng.has_unfinished():
            eng.step()
            step += 1
    finally:
        torch.set_num_threads(threads)
    if eng.scheduler.num_preemptions == 0:
        raise RuntimeError("the workload of 06.first_preempt never preempts: fix the workload")
    return step, next(i for i, s in enumerate(seqs) if s.num_preemptions)


PREEMPT_HINT = """Add the requests to an Engine built with the options given, then call
`engine.step()` one step at a time, counting, until `engine.scheduler.num_preemptions` becomes
positive. The sequences `add_request` returned carry `num_preemptions` each. For a prediction by
hand: count the blocks each running request holds as it grows, one token per decode step."""


def _int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise grading.Wrong(f"{name}: expected an int, found {feedback.describe(value)}")
    return value


@grading.exercise("06.first_preempt", hint=PREEMPT_HINT)
def first_preempt(predicted, step, victim) -> None:
    """predicted, step: the step (counting from 1) of the first preemption; victim: its request's index."""
    _int(predicted, "PREDICTED_STEP (recorded, not graded)")
    want_step, want_victim = first_preemption()
    feedback.expect(_int(step, "STEP") == want_step,
                    "STEP: that is not the step at which the engine first preempts", want_step, step)
    feedback.expect(_int(victim, "VICTIM") == want_victim,
                    "VICTIM: that is not the request the engine preempts first", want_victim, victim)
