"""The fixed expectations of the 06 and 07 checkers (issue 39): the checkers hold frozen answers and
never run the engine or a copy of the notebook's solution, so they do not move when the engine does.
Here the engine and an event-by-event replay, run on the cases those answers stand for, must still
give them: a change of the engine's rules shows up as a failing test, not as a checker that quietly
follows it. The generators below are the ones the tables were frozen with."""
from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

from course_kit import grading, nbbuild
from course_kit.grading.checks import nb06, nb07, registry

registry.load_hidden(Path(nbbuild.PROJECT) / "instructor" / "hidden_checks", {"06", "07"})
HIDDEN06 = sys.modules["_course_kit_hidden_nb06"]
HIDDEN07 = sys.modules["_course_kit_hidden_nb07"]


# ---- 06.prefix_admit: the engine's BlockManager and admit on the frozen cases -------------------

def _seq(name, tokens):
    from course_kit.engine.sequence import SamplingParams, Sequence
    return Sequence(name, list(tokens), SamplingParams())


def build_state(spec: dict):
    """A block manager as the engine leaves it: running requests computed and holding their blocks,
    finished ones freed (their full blocks stay cached), fillers holding blocks of unrelated tokens."""
    from course_kit.engine.block_manager import BlockManager
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


def case_of(spec: dict) -> tuple:
    """The learner's view of a cache state: every full-block prefix the block manager can hit, with
    whether a running request holds its last block (shuffled: the order carries nothing)."""
    bm = build_state(spec)
    bs, cached, seen = bm.block_size, [], set()
    for tokens in spec["running"] + spec["finished"]:
        for end in range(bs, len(tokens) + 1, bs):
            prefix = tuple(tokens[:end])
            if prefix in seen:
                continue
            seen.add(prefix)
            hit, held = bm.cached_prefix(_seq("probe", list(prefix) + [0]))
            if hit != end:
                continue
            _, held_before = bm.cached_prefix(_seq("probe", list(prefix[:-bs]) + [0])) if end > bs else (0, 0)
            cached.append((list(prefix), held > held_before))
    random.Random(len(cached)).shuffle(cached)
    return ([list(p) for p in spec["waiting"]], cached, bm.block_size, bm.num_free_blocks,
            spec["free_slots"], spec["budget"])


def engine_admit(spec: dict) -> list[int]:
    """The engine's admit, with the block manager's hits read one request at a time and each admitted
    request taking its blocks before the next one's hits are looked up (as Scheduler._admit does)."""
    from course_kit.engine.scheduler import admit
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


def random_spec(rng: random.Random) -> dict:
    bs = rng.choice([2, 4, 8])
    words = lambda n: [rng.choice(range(1, 30)) for _ in range(n)]              # noqa: E731
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


def frozen(seed: int, full: int, empty: int) -> list[tuple]:
    """The cases a table froze: seeded random states where the rule as the task states it
    (the notebook's solution) agrees with the engine, `full` admitting someone and `empty` nobody."""
    from grading_fixtures import solution_namespace
    rule = solution_namespace("06", "06.prefix_admit")["prefix_admit"]
    rng, out, nobody = random.Random(seed), [], 0
    while len(out) < full + empty:
        spec = random_spec(rng)
        case = case_of(spec)
        want = engine_admit(spec)
        if rule(*case) != want:
            continue
        if want and len(out) - nobody < full or not want and nobody < empty:
            nobody += not want
            out.append((case, want))
    return out


def _plain(table):
    return [((c[0], [(list(p), bool(h)) for p, h in c[1]], *c[2:]), list(w)) for c, w in table]


def test_06_frozen_random_cases_are_what_the_engine_gives():
    assert _plain(frozen(6, 20, 4)) == _plain(nb06.NN_RANDOM)
    assert _plain(frozen(66, 14, 2)) == _plain(HIDDEN06.HIDDEN_RANDOM)


NAMED_STATES = {   # the cache states the named cases describe in their comments
    "nothing cached": dict(block_size=4, num_blocks=8, running=[], finished=[], fillers=0),
    "a prefix held by a running request costs no block":
        dict(block_size=4, num_blocks=6, running=[nb06.S8 + [20]], finished=[], fillers=0),
    "a cached prefix nobody holds still costs a free block":
        dict(block_size=4, num_blocks=4, running=[], finished=[nb06.S8 + [20]], fillers=1),
    "the whole prompt is cached: its last block is computed again":
        dict(block_size=4, num_blocks=8, running=[nb06.S8], finished=[], fillers=0),
    "a hit stops at the first block that differs":
        dict(block_size=4, num_blocks=10, running=[nb06.S8 + [9, 10, 11, 12, 13]], finished=[], fillers=0),
    "the same block after a different start is not a hit":
        dict(block_size=4, num_blocks=8, running=[nb06.S8 + [20]], finished=[], fillers=0),
    "cached blocks the first admitted request took are held for the second":
        dict(block_size=4, num_blocks=5, running=[], finished=[nb06.S8 + [20]], fillers=0),
    "two waiting requests share a prefix nobody computed yet":
        dict(block_size=4, num_blocks=7, running=[], finished=[], fillers=0),
    "cached tokens need no budget": dict(block_size=4, num_blocks=9, running=[nb06.S8 + nb06.S8], finished=[],
                                         fillers=0),
    "block size 1, whole prompt cached": dict(block_size=1, num_blocks=12, running=[[3, 4, 5, 6]], finished=[],
                                              fillers=0),
    "a finished prompt asked again, nothing free but its own blocks":
        dict(block_size=2, num_blocks=3, running=[], finished=[[7, 8, 9, 10, 11]], fillers=0),
}


def test_06_named_cases_are_the_states_they_describe_and_the_engine_agrees():
    for name, (waiting, cached, bs, free_blocks, slots, budget), want in nb06.NAMED + HIDDEN06.EDGE:
        spec = {**NAMED_STATES[name], "waiting": [list(w) for w in waiting], "free_slots": slots, "budget": budget}
        learner = case_of(spec)
        assert sorted(map(lambda c: (tuple(c[0]), c[1]), learner[1])) == sorted((tuple(p), h) for p, h in cached)
        assert learner[2:4] == (bs, free_blocks), name
        assert engine_admit(spec) == want, name


def test_06_the_checker_does_not_move_with_the_engine(monkeypatch):
    """A broken engine (admit ignoring every prefix hit) changes no verdict: the checker holds its answers."""
    from course_kit.engine import scheduler
    rule = __import__("grading_fixtures").solution_namespace("06", "06.prefix_admit")["prefix_admit"]
    monkeypatch.setattr(scheduler, "admit", lambda waiting, *a, prefix_hits=None: [])
    grading.check("06.prefix_admit", rule)
    grading.check("06.prefix_admit_hidden", rule)
    import ast
    for module in (nb06, nb07):     # and neither checker imports the engine or the lesson's timelines
        tree = ast.parse(Path(module.__file__).read_text())
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names} | \
                {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not [m for m in names if m.startswith(("course_kit.engine", "course_kit.streams"))], names


def test_06_first_preempt_key_is_what_the_engine_does():
    """The key's step and victim (derived by hand in the instructor's nb06.py), measured with the engine."""
    import torch

    from course_kit.engine import Engine
    from course_kit.engine.sequence import SamplingParams
    from course_kit.models import llama
    torch.set_num_threads(1)
    model = llama.Transformer.from_preset("tiny", seed=0)
    w = nb06.PREEMPT_WORKLOAD
    eng = Engine(model, **w["options"])
    seqs = [eng.add_request(p, SamplingParams(max_new_tokens=n, ignore_eos=True))
            for p, n in zip(nb06.preempt_prompts(model.config.vocab_size), w["new_tokens"])]
    step = 0
    while eng.scheduler.num_preemptions == 0 and eng.has_unfinished():
        eng.step()
        step += 1
    victim = next(i for i, s in enumerate(seqs) if s.num_preemptions)
    assert registry.key("06.first_preempt") == {"step": step, "victim": victim} == {"step": 19, "victim": 3}


# ---- 07: an event-by-event replay of the async loop ------------------------------------------------

def replay_async(spans: list[dict], slowdown: float) -> float:
    """Replay the async loop event by event: the host prepares step k, queues it, then (from step 1 on)
    blocks until step k-1's tokens are back before it prepares step k+1; the device runs queued steps in
    order. Returns the wall time from the first preparation."""
    host, dev = {}, {}
    for s in spans:
        (host if s["lane"] == "cpu" else dev)[int(s["name"].split()[-1])] = s["end_s"] - s["start_s"]
    host_clock, device_free, done = 0.0, 0.0, []
    for k in range(len(dev)):
        host_clock += host[k] * slowdown
        device_free = max(device_free, host_clock) + dev[k]
        done.append(device_free)
        if k >= 1:
            host_clock = max(host_clock, done[k - 1])
    return device_free


def test_07_fixed_walls_are_what_the_replay_gives():
    for name, spans, slowdown, wall in nb07.bound_cases() + HIDDEN07._named():
        assert replay_async(spans, slowdown) == pytest.approx(wall, rel=1e-12), name


def test_07_replay_matches_the_synthetic_async_timeline():
    from course_kit.streams.timeline import Timeline
    sync, async_ = nb07.predict_pair()
    lo, hi = Timeline.from_records(async_).window()
    assert replay_async(sync, 1.25) == pytest.approx(hi - lo, rel=1e-12)


def test_07_overlap_predict_key_is_what_timeline_measures():
    from course_kit.streams.timeline import Timeline
    sync, async_ = (Timeline.from_records(t) for t in nb07.predict_pair())
    wall = lambda tl: tl.window()[1] - tl.window()[0]   # noqa: E731
    measured = {"idle_sync": sync.idle_fraction("gpu"), "idle_async": async_.idle_fraction("gpu"),
                "bound": sync.overlap_speedup_bound(["cpu", "gpu"]), "speedup": wall(sync) / wall(async_)}
    key = registry.key("07.overlap_predict")
    assert measured == pytest.approx(key, rel=1e-12)
