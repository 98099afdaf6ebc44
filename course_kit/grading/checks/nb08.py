"""Checks for notebook 08 (flash attention): merging two partial softmax states inside a Triton
kernel (flash-decoding's combine), and predicting, measuring and explaining the causal kernel's tiles
and HBM traffic.

Oracles: for 08.merge_states, the merge computed in float64 from the very float32 states the
learner's kernel was given (the states themselves are built from real scores and values, in
float64, by the definition of m, l and acc); for 08.causal_traffic, the instructor's answer key
(instructor/hidden_checks/nb08.py: the course's own tile rule and IO counts, which the notebook's
figures and widget read); this package checks the form of that answer.
"""
from __future__ import annotations

import torch

from course_kit import grading
from course_kit.grading.checks import feedback, registry

# ---- 08.merge_states ----------------------------------------------------------------------------

# (label for messages, rows, head dim, keys in part 1, keys in part 2, base score, shift of part 2's
#  scores (None: a random shift per row), rows whose part 1 / part 2 saw no key). Scores are in
#  base-2 units, as the course kernel keeps m.
MERGE_CASES = [
    ("random parts of similar scale", 16, 32, 8, 11, 0.0, 0.0, (), ()),
    ("part 2's scores far above part 1's", 16, 32, 12, 5, 0.0, 30.0, (), ()),
    ("part 1's scores a few units above part 2's", 8, 16, 6, 9, 0.0, -4.0, (), ()),
    ("scores near 200 (2^200 overflows float32 unless the max is subtracted)", 16, 64, 7, 7, 200.0, 3.0, (), ()),
    ("a head dim that is not a power of two and rows with very different maxima", 5, 24, 9, 4, 0.0, None, (), ()),
    ("one part empty on some rows (m = -inf, l = 0, acc = 0: a slice past a short context)",
     12, 32, 10, 6, 0.0, 1.0, (0, 1, 2, 3), (4, 5, 6, 7)),
    ("both parts empty on some rows (padding rows: the merge must stay empty, with no NaN)",
     8, 16, 5, 5, 0.0, -1.0, (0, 3, 5), (0, 3, 6)),
    ("70 rows (several programs of the launcher)", 70, 32, 16, 16, 0.0, None, (), ()),
]


def _partial(scores: torch.Tensor, values: torch.Tensor, empty: tuple) -> tuple[torch.Tensor, ...]:
    """(m, l, acc) of one part, float64, by definition: m = max s, l = sum 2^(s - m), acc = sum 2^(s - m) v."""
    m = scores.amax(-1)
    p = torch.exp2(scores - m.unsqueeze(-1))
    l, acc = p.sum(-1), p @ values
    rows = list(empty)
    m[rows], l[rows], acc[rows] = float("-inf"), 0.0, 0.0
    return m, l, acc


def merge_cases(table: list[tuple] = MERGE_CASES, seed: int = 808) -> list[tuple]:
    """Two float32 partial states (m1, l1, acc1, m2, l2, acc2) per row of `table`, built from seeded
    scores and values (also used by the instructor's hidden check, with its own table and seed)."""
    g = torch.Generator().manual_seed(seed)
    cases = []
    for _, rows, d, n1, n2, base, shift, empty1, empty2 in table:
        if shift is None:   # each row its own shift, so some rows' max comes from each part
            shift_rows = torch.empty(rows, 1, dtype=torch.float64).uniform_(-12, 12, generator=g)
        else:
            shift_rows = torch.full((rows, 1), shift, dtype=torch.float64)
        s1 = torch.randn(rows, n1, generator=g, dtype=torch.float64) * 3 + base
        s2 = torch.randn(rows, n2, generator=g, dtype=torch.float64) * 3 + base + shift_rows
        v1 = torch.randn(n1, d, generator=g, dtype=torch.float64)
        v2 = torch.randn(n2, d, generator=g, dtype=torch.float64)
        parts = _partial(s1, v1, empty1) + _partial(s2, v2, empty2)
        cases.append(tuple(t.to(torch.float32) for t in parts))
    return cases


def _merge_cases() -> list[tuple]:
    return merge_cases()


def merge_reference(m1, l1, acc1, m2, l2, acc2) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The merged (m, l, acc), in float64 from the given states, as float32 (the kernel's dtype)."""
    m1, l1, acc1, m2, l2, acc2 = (t.double() for t in (m1, l1, acc1, m2, l2, acc2))
    m = torch.maximum(m1, m2)
    empty = torch.isinf(m) & (m < 0)
    safe = torch.where(empty, torch.zeros_like(m), m)
    a1, a2 = torch.exp2(m1 - safe), torch.exp2(m2 - safe)
    l = l1 * a1 + l2 * a2
    acc = acc1 * a1.unsqueeze(-1) + acc2 * a2.unsqueeze(-1)
    return m.float(), l.float(), acc.float()


MERGE_HINT = """The merged max is the larger of the two maxima. Each part's sum and accumulator were
taken relative to its own max, so scale part i by 2^(m_i - m) (tl.math.exp2) before adding: l and acc
alike (acc row by row: a factor of shape [ROWS] becomes [ROWS, 1] with [:, None]). An empty part has
m = -inf, and 2^(-inf - m) = 0 is right; but when both parts are empty, -inf - (-inf) is NaN:
subtract a max that tl.where has replaced by 0 on those rows."""


@grading.exercise("08.merge_states", cases=_merge_cases, hint=MERGE_HINT)
def merge_states(fn) -> None:
    """fn(m1, l1, acc1, m2, l2, acc2) -> (m, l, acc): the learner's @triton.jit helper, run by the
    notebook's launcher on each case (float32 CPU tensors in and out)."""
    judge_merge(fn, MERGE_CASES, _merge_cases())


def judge_merge(fn, table: list[tuple], cases: list[tuple]) -> None:
    """Raise Wrong at the first case (named by its label in `table`) where fn's merge is wrong."""
    for (label, *_), case in zip(table, cases):
        got = fn(*case)
        if not (isinstance(got, (tuple, list)) and len(got) == 3):
            raise grading.Wrong(f"merge on {label}: expected a tuple (m, l, acc), found {feedback.describe(got)}")
        for name, found, want in zip(("m", "l", "acc"), got, merge_reference(*case)):
            if isinstance(found, torch.Tensor) and found.is_floating_point() and found.shape == want.shape:
                nan = found.isnan() & ~want.isnan()
                if bool(nan.any()):
                    raise grading.Wrong(f"{name} on {label}: {int(nan.sum())} of {nan.numel()} values are NaN")
            finite = want[torch.isfinite(want)]
            scale = float(finite.abs().max()) if finite.numel() else 1.0
            # float32 accuracy: a few roundings of each term, relative to the row's magnitude
            feedback.tensor(found, want, f"{name} on {label}", rtol=2e-5, atol=2e-6 * scale)


# ---- 08.causal_traffic --------------------------------------------------------------------------

TRAFFIC = {"head_dim": 128, "block_m": 128, "block_n": 64, "tiles_seq_len": 1950,
           "ratio_seq_lens": (2048, 4096, 8192, 16384)}
CHOICES = "ABCD"   # which CAUSE is right only the hidden checker knows (instructor/hidden_checks/nb08.py)


TRAFFIC_HINT = """Measure with the functions that draw the figures above: tiles.tile_counts(tiles.tile_grid(
S, BLOCK_M, BLOCK_N, causal=True)) counts tiles of each kind (computed = no mask + masked; at a ragged
end, look at what the last query block can see); io_complexity.standard_accesses(S, d, causal=True) and
io_complexity.kernel_accesses(S, d, BLOCK_M, BLOCK_N, causal=True) count element accesses. For the
limit, compare the terms of both counts that grow fastest with S, or measure at much larger S."""


def _number(found, what: str, kind: type = float) -> None:
    if isinstance(found, bool) or not isinstance(found, (int,) if kind is int else (int, float)):
        raise grading.Wrong(f"{what}: expected {'an int' if kind is int else 'a number'}, found "
                            f"{feedback.describe(found)}")


@grading.exercise("08.causal_traffic", hint=TRAFFIC_HINT, later="CAUSE", keyed="TILES, RATIOS and LIMIT")
def causal_traffic(prediction, tiles, ratios, limit, cause) -> None:
    """prediction: {"tiles": int, "doubling": letter}, recorded before measuring (its accuracy is
    not graded); tiles: int; ratios: list of 4 numbers (one per S in TRAFFIC); limit: number; cause: letter."""
    lens = TRAFFIC["ratio_seq_lens"]
    wrong = feedback.Fields()
    with wrong.field():
        if not (isinstance(prediction, dict) and {"tiles", "doubling"} <= set(prediction)):
            raise grading.Wrong("PREDICTION must be recorded before measuring: a dict with keys 'tiles' and "
                                f"'doubling', found {feedback.describe(prediction)}")
        if isinstance(prediction["tiles"], bool) or not isinstance(prediction["tiles"], int):
            raise grading.Wrong(f"PREDICTION['tiles'] must be an int, found {feedback.describe(prediction['tiles'])}")
        feedback.choice(prediction["doubling"], "PREDICTION['doubling']", CHOICES)
    with wrong.field():
        _number(tiles, f"tiles computed at S = {TRAFFIC['tiles_seq_len']}", int)
    with wrong.field():
        if not (isinstance(ratios, (list, tuple)) and len(ratios) == len(lens)):
            raise grading.Wrong(f"RATIOS: expected a list of {len(lens)} numbers (S = {', '.join(map(str, lens))}), "
                                f"found {feedback.describe(ratios)}")
        for s, found in zip(lens, ratios):
            _number(found, f"traffic ratio (standard / kernel) at S = {s}")
    with wrong.field():
        _number(limit, "the ratio's limit as S grows")
    with wrong.field():
        feedback.choice(cause, "CAUSE", CHOICES)
    wrong.done()
    want = registry.key("08.causal_traffic")
    if want is None:
        return
    with wrong.field():
        grading.expect(tiles == want["tiles"], f"tiles computed at S = {TRAFFIC['tiles_seq_len']} is wrong",
                       want["tiles"], tiles)
    with wrong.field():
        for s, found, w in zip(lens, ratios, want["ratios"]):
            feedback.number(found, w, f"traffic ratio (standard / kernel) at S = {s}", rel=1e-6)
    with wrong.field():
        feedback.number(limit, want["limit"], "the ratio's limit as S grows", rel=5e-3)
    wrong.done()
