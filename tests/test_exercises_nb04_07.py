"""Notebooks 04 to 07's exercises: the instructor's solutions (taken from the notebooks' sources)
pass, near misses fail with a short message that never shows the expected value, and one case goes
through the out-of-process judge, as grading does.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from grading_fixtures import fails as _fails, judge_verdicts, shows as _shows, solution_namespace as _solution

from course_kit import grading, nbbuild
from course_kit.grading.checks import nb04, nb05, nb06, registry

registry.load_hidden(Path(nbbuild.PROJECT) / "instructor" / "hidden_checks", {"04", "05", "06", "07"})


# ---- 04.silent_trap -----------------------------------------------------------------------------

TRAP_TRUTH = {"jit.trace": "refused", "jit.script": "correct", "fx": "silently wrong", "export": "silently wrong"}


def test_04_trap_measures_what_the_notebook_says():
    assert registry.key("04.silent_trap")["measured"] == TRAP_TRUTH    # measured: test_answer_keys.py


def test_04_notebook_and_checker_share_the_trap():
    """One CountCalls: the notebook shows and runs capture_traps' trap, and the checker measures the same one."""
    from course_kit.capture import traps as capture_traps
    text = (nbbuild.SOURCES / "04_graph_capture.py").read_text()
    assert "TRAP = counter_trap()" in text and "class CountCalls" not in text
    assert nb04.trap_case().make is capture_traps.CountCalls


def test_04_silent_trap_passes_whatever_the_prediction():
    for predicted in (TRAP_TRUTH, {m: "correct" for m in TRAP_TRUTH}):
        grading.check("04.silent_trap", predicted, dict(TRAP_TRUTH), "B")
    grading.check("04.silent_trap", TRAP_TRUTH, TRAP_TRUTH, " b ")


def test_04_silent_trap_near_misses():
    one_off = {**TRAP_TRUTH, "export": "refused"}
    msg = _fails("04.silent_trap", TRAP_TRUTH, one_off, "B", says="1 of 4 methods")
    assert "export" in msg and "silently wrong" not in msg
    _fails("04.silent_trap", TRAP_TRUTH, TRAP_TRUTH, 2, says="CAUSE: expected one of")
    _fails("04.silent_trap", None, TRAP_TRUTH, "B", says="PREDICTED")
    _fails("04.silent_trap", {"fx": "refused"}, TRAP_TRUTH, "B", says="missing")
    _fails("04.silent_trap", TRAP_TRUTH, {**TRAP_TRUTH, "fx": "wrong"}, "B", says="must be one of")


# ---- 05.choose_buckets --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def choose():
    return _solution("05", "05.choose_buckets")["choose_buckets"]


def test_05_choose_buckets_solution_passes_with_its_hidden_check(choose):
    grading.check("05.choose_buckets", choose)
    grading.check("05.choose_buckets_hidden", choose)


def test_05_brute_force_agrees_with_the_solution_on_small_random_traces(choose):
    import random
    rng = random.Random(3)
    for _ in range(200):
        batches = [rng.randint(1, 10) for _ in range(rng.randint(1, 25))]
        k = rng.randint(1, 5)
        sizes = choose(batches, k)
        assert nb05.padding_rows(batches, sizes) == nb05.best_padding(batches, k)


def test_05_choose_buckets_near_misses(choose):
    def powers_of_two(batches, k):
        top, sizes = max(batches), []
        s = 1
        while s < top and len(sizes) < k - 1:
            sizes.append(s)
            s *= 2
        return sizes + [top]

    def most_frequent(batches, k):
        from collections import Counter
        common = [b for b, _ in Counter(batches).most_common() if b != max(batches)][:k - 1]
        return common + [max(batches)]

    msg = _fails("05.choose_buckets", powers_of_two, says="another choice")
    assert "pads fewer" in msg
    _fails("05.choose_buckets", most_frequent, says="another choice")
    _fails("05.choose_buckets", lambda b, k: choose(b, k - 1) if k > 1 else choose(b, k), says="another choice")
    _fails("05.choose_buckets", lambda b, k: sorted(set(b)), says="more than the k")
    _fails("05.choose_buckets", lambda b, k: [s for s in choose(b, k) if s != max(b)] or [1], says="does not hold")
    _fails("05.choose_buckets", lambda b, k: [float(s) for s in choose(b, k)], says="(float)")

    def one_element_off(batches, k):
        sizes = choose(batches, k)
        return [sizes[0] + 1] + sizes[1:] if len(sizes) > 1 and sizes[0] + 1 < sizes[1] else sizes
    msg = _fails("05.choose_buckets", one_element_off, says="pads")
    assert "expected" not in msg


def test_05_choose_buckets_stub_says_not_implemented():
    def stub(batches, k):
        raise NotImplementedError("Exercise 05.choose_buckets: write it")
    _fails("05.choose_buckets", stub, says="NotImplementedError")


# ---- 05.bucket_waste ----------------------------------------------------------------------------

def _waste():
    a = registry.key("05.bucket_waste")             # measured with buckets.bucket_cost: test_answer_keys.py
    return a["waste"], a["worst"], a["extra"]


def test_05_bucket_waste_passes_whatever_the_prediction():
    waste, worst, extra = _waste()
    assert 0 < waste < 1 and worst in nb05.WASTE_SIZES and extra not in nb05.WASTE_SIZES
    for predicted in (0.0, 0.5, 1):
        grading.check("05.bucket_waste", predicted, waste, worst, extra)


def test_05_bucket_waste_extra_is_unambiguous():
    batches = nb05.waste_trace()
    rows = sorted(nb05.padding_rows(batches, nb05.WASTE_SIZES + [s]) for s in (3, 5, 6, 7))
    assert rows[0] < rows[1]


def test_05_bucket_waste_near_misses():
    waste, worst, extra = _waste()
    msg = _fails("05.bucket_waste", 0.1, waste * 1.01, worst, extra, says="WASTE")
    assert not _shows(msg, waste)
    _fails("05.bucket_waste", 0.1, waste * 100, worst, extra, says="WASTE")
    _fails("05.bucket_waste", 0.1, waste, 4 if worst != 4 else 8, extra, says="WORST_BUCKET")
    msg = _fails("05.bucket_waste", 0.1, waste, worst, extra + 1, says="EXTRA")
    assert f"found {extra + 1}" in msg and f"found {extra}," not in msg
    _fails("05.bucket_waste", 0.1, waste, float(worst), extra, says="an int")
    _fails("05.bucket_waste", None, waste, worst, extra, says="PREDICTED_WASTE")


# ---- 06.prefix_admit ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def prefix_admit():
    return _solution("06", "06.prefix_admit")["prefix_admit"]


def _variant(no_last_block_rule=False, free_cached_costs_nothing=False, never_held=False,
             chunk_ignores_cache=False, block_by_block=False):
    def fn(waiting, cached, block_size, free_blocks, free_slots, token_budget):
        held_now = {tuple(p): h for p, h in cached}
        by_content = {tuple(p[-block_size:]): tuple(p) for p, _ in cached}   # a block named by its own tokens
        chunks = []
        for tokens in waiting:
            hits = []
            stop = len(tokens) + 1 if no_last_block_rule else len(tokens)
            for end in range(block_size, stop, block_size):
                if block_by_block:
                    if tuple(tokens[end - block_size:end]) in by_content:
                        hits.append(by_content[tuple(tokens[end - block_size:end])])
                    continue
                if tuple(tokens[:end]) not in held_now:
                    break
                hits.append(tuple(tokens[:end]))
            held = len(hits) if free_cached_costs_nothing else sum(held_now[h] for h in hits)
            blocks = -(-len(tokens) // block_size) - held
            if free_slots == 0 or token_budget == 0 or blocks > free_blocks:
                break
            chunk = min(len(tokens) if chunk_ignores_cache else len(tokens) - len(hits) * block_size, token_budget)
            chunks.append(chunk)
            if not never_held:
                for h in hits:
                    held_now[h] = True
            free_slots, free_blocks, token_budget = free_slots - 1, free_blocks - blocks, token_budget - chunk
        return chunks
    return fn


def test_06_prefix_admit_solution_passes_with_its_hidden_check(prefix_admit):
    grading.check("06.prefix_admit", prefix_admit)
    grading.check("06.prefix_admit_hidden", prefix_admit)
    grading.check("06.prefix_admit", _variant())          # the test's own writing of the rule


@pytest.mark.parametrize("near, says", [
    ({"no_last_block_rule": True}, "the whole prompt is cached"),
    ({"free_cached_costs_nothing": True}, "nobody holds still costs a free block"),
    ({"never_held": True}, "the first admitted request took are held"),
    ({"chunk_ignores_cache": True}, "prefill chunk"),
    ({"block_by_block": True}, "a hit stops at the first block that differs"),
])
def test_06_prefix_admit_near_misses_fail_on_their_case(near, says):
    msg = _fails("06.prefix_admit", _variant(**near), says=says)
    assert "expected" not in msg


def test_06_the_lessons_admit_alone_is_not_enough():
    from course_kit.engine.scheduler import admit
    _fails("06.prefix_admit", lambda w, c, bs, fb, fs, tb: admit([len(p) for p in w], fb, bs, fs, tb))


def test_06_prefix_admit_names_the_type():
    _fails("06.prefix_admit", lambda *a: tuple(_variant()(*a)) or None, says="expected a list")


def test_06_first_preempt():
    key = registry.key("06.first_preempt")        # checked against the engine in test_exercise_tables.py
    step, victim = key["step"], key["victim"]
    for predicted in (1, 100):
        grading.check("06.first_preempt", predicted, step, victim)
    msg = _fails("06.first_preempt", 10, step + 1, victim, says="STEP")
    assert f"found {step + 1}" in msg and str(step) + " " not in msg.replace(f"found {step + 1}", "")
    _fails("06.first_preempt", 10, step - 1, victim, says="STEP")
    _fails("06.first_preempt", 10, step, (victim + 1) % 6, says="VICTIM")
    _fails("06.first_preempt", 10, float(step), victim, says="expected an int")
    _fails("06.first_preempt", None, step, victim, says="PREDICTED_STEP")
    # every wrong field at once, still without the right values
    msg = _fails("06.first_preempt", 10, step + 2, (victim + 1) % 6, says="STEP")
    assert "VICTIM" in msg and f"{step}" not in msg.replace(f"found {step + 2}", "")


def test_06_first_preempt_workload_matches_the_notebook():
    text = (nbbuild.SOURCES / "06_batching.py").read_text()
    w = nb06.PREEMPT_WORKLOAD
    assert f"PROMPT_LENS, NEW_TOKENS = {w['prompt_lens']}, {w['new_tokens']}" in text
    o = w["options"]
    assert (f'OPTS = dict(policy="{o["policy"]}", max_num_seqs={o["max_num_seqs"]}, block_size={o["block_size"]}, '
            f'num_blocks={o["num_blocks"]}, max_num_batched_tokens={o["max_num_batched_tokens"]})') in text


# ---- 07.async_bound -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def async_bound():
    return _solution("07", "07.async_bound")["async_bound"]


def test_07_async_bound_solution_passes_with_its_hidden_check(async_bound):
    grading.check("07.async_bound", async_bound)
    grading.check("07.async_bound_hidden", async_bound)


def test_07_async_bound_near_misses(async_bound):
    def no_slowdown(spans, slowdown):
        return async_bound(spans, 1.0)

    def unbounded_lookahead(spans, slowdown):
        host, dev = {}, {}
        for s in spans:
            (host if s["lane"] == "cpu" else dev)[int(s["name"].split()[-1])] = s["end_s"] - s["start_s"]
        host, dev = [host[k] for k in sorted(host)], [dev[k] for k in sorted(dev)]
        prepared, done = 0.0, 0.0
        for c, g in zip(host, dev):
            prepared += slowdown * c
            done = max(done, prepared) + g
        window = max(s["end_s"] for s in spans) - min(s["start_s"] for s in spans)
        return done, window / done

    def busy_not_window(spans, slowdown):
        wall, _ = async_bound(spans, slowdown)
        return wall, sum(s["end_s"] - s["start_s"] for s in spans) / wall

    _fails("07.async_bound", no_slowdown, says="async wall time")
    _fails("07.async_bound", unbounded_lookahead, says="async wall time")
    _fails("07.async_bound", busy_not_window, says="speed-up")
    msg = _fails("07.async_bound", lambda s, d: (async_bound(s, d)[0] * 1.01, async_bound(s, d)[1]),
                 says="not within")
    assert "expected" not in msg
    _fails("07.async_bound", lambda s, d: list(async_bound(s, d)), says="expected a tuple")


# ---- 07.overlap_predict -------------------------------------------------------------------------

def test_07_overlap_predict():
    a = registry.key("07.overlap_predict")         # checked against Timeline in test_exercise_tables.py
    answers = [a["idle_sync"], a["idle_async"], a["bound"], a["speedup"]]
    assert a["speedup"] < a["bound"]
    grading.check("07.overlap_predict", {"speedup": 1.6}, *answers, "C")
    for i, name in enumerate(["IDLE_SYNC", "IDLE_ASYNC", "BOUND", "SPEEDUP"]):
        near = list(answers)
        near[i] *= 1.01
        msg = _fails("07.overlap_predict", {"x": 1}, *near, "C", says=name)
        assert not _shows(msg, answers[i])
    _fails("07.overlap_predict", {"x": 1}, *answers, None, says="CAUSE: expected one of")
    _fails("07.overlap_predict", None, *answers, "C", says="PREDICTED")
    msg = _fails("07.overlap_predict", {"x": 1}, answers[0] * 1.01, answers[1], answers[2] * 1.01, answers[3], "C",
                 says="IDLE_SYNC")                 # every wrong field at once
    assert "BOUND" in msg and "IDLE_ASYNC" not in msg and not _shows(msg, answers[2])


def test_07_overlap_predict_timelines_match_the_notebook():
    text = (nbbuild.SOURCES / "07_async_streams.py").read_text()
    assert 'start = 0.0 if k == 0 else k - 0.25' in text and "t = 1.6 * k" in text


# ---- hints and the judge ------------------------------------------------------------------------

@pytest.mark.parametrize("exercise_id, words", [
    ("04.silent_trap", "ir_text"), ("05.choose_buckets", "dynamic program"), ("05.bucket_waste", "bucket_cost"),
    ("06.prefix_admit", "first miss"), ("06.first_preempt", "num_preemptions"),
    ("07.async_bound", "slowdown"), ("07.overlap_predict", "idle_fraction"),
])
def test_hints_are_written_for_these_exercises(capsys, exercise_id, words):
    grading.hint(exercise_id)
    assert words in capsys.readouterr().out


def test_prefix_admit_goes_through_the_out_of_process_judge(prefix_admit, tmp_path, monkeypatch):
    verdicts = judge_verdicts("06.prefix_admit", dict((("solution", prefix_admit), ("never_held", _variant(never_held=True)))), tmp_path, monkeypatch)
    assert verdicts["solution"]["status"] == "passed", verdicts
    assert verdicts["never_held"]["status"] == "failed"
    assert "held" in verdicts["never_held"]["message"]


def test_hidden_checks_fail_near_misses(choose, async_bound):
    _fails("05.choose_buckets_hidden", lambda b, k: choose(b, k - 1) if k > 1 else choose(b, k), says="pads fewer")
    _fails("06.prefix_admit_hidden", _variant(no_last_block_rule=True), says="block size 1, whole prompt cached")
    _fails("07.async_bound_hidden", lambda s, d: async_bound(s, 1.0), says="async wall time")
