"""Checks for notebook 00 (the roofline).

- 00.decode_batch: predict, then measure with the course's roofline functions, the smallest batch at
  which a decode step's matrix-vector product becomes compute-bound on the H200 datasheet roofline;
  then say what fp8 (1 byte per element, twice the peak) does to that batch. BATCH is checked by
  what it must be (compute-bound, and the batch below it not), FP8's letter by the instructor's
  answer key (instructor/hidden_checks/nb00.py): nothing here returns either answer.
"""
from __future__ import annotations

from course_kit import grading
from course_kit.grading.checks import feedback, registry

OP = "matrix-vector (decode, n x n weights)"
N = 8192
GPU = "H200"
CHOICES = ("A", "B", "C", "D")     # fp8's batch: (A) about halves, (B) stays the same, (C) doubles, (D) quadruples


def is_compute_bound(batch: int, dtype: str = "bf16", n: int = N) -> bool:
    """Whether the decode matrix-vector product at this batch sits right of the datasheet ridge."""
    from course_kit import device
    from course_kit.roofline import ceilings as roofline
    spec = device.peaks(GPU)
    cost = roofline.op_cost(OP, n, dtype, batch)
    return roofline.place(cost, spec.hbm_gbs, {dtype: spec.tflops(dtype)})["bound"] == "compute"


HINT = """Measure with the functions behind the explorer: spec = device.peaks("H200"); cost =
roofline.op_cost("matrix-vector (decode, n x n weights)", 8192, "bf16", batch); then
roofline.place(cost, spec.hbm_gbs, {"bf16": spec.tflops("bf16")})["bound"], for batch = 1, 2, ...
The weights are read once for the whole batch, but the activations grow with it: the batch needed is
not exactly the ridge. For fp8, compare how the intensity and the ridge both change."""


def _int(found, what: str) -> int:
    if isinstance(found, bool) or not isinstance(found, int):
        raise grading.Wrong(f"{what}: expected an int, found {feedback.describe(found)}")
    return found


@grading.exercise("00.decode_batch", hint=HINT, keyed="FP8")
def decode_batch(predicted, batch, fp8) -> None:
    """predicted: the batch guessed before measuring (recorded, not graded); batch: the smallest
    compute-bound batch; fp8: a letter."""
    wrong = feedback.Fields()
    with wrong.field():
        _int(predicted, "PREDICTED_BATCH (recorded, not graded)")
    with wrong.field():
        b = _int(batch, "BATCH")
        if b < 1 or not is_compute_bound(b):
            raise grading.Wrong(f"BATCH: at batch {b} the product is still memory-bound on the {GPU} datasheet "
                                "roofline")
        if b > 1 and is_compute_bound(b - 1):
            raise grading.Wrong(f"BATCH: batch {b} is compute-bound, but it is not the smallest such batch")
    with wrong.field():
        if not (isinstance(fp8, str) and fp8.strip().upper() in CHOICES):
            raise grading.Wrong(f"FP8: expected one of {', '.join(map(repr, CHOICES))}, found {fp8!r}"[:200])
    wrong.done()
    key = registry.key("00.decode_batch")
    if key is not None:
        grading.expect(fp8.strip().upper() == key["fp8"], "FP8: that is not what fp8 does to the batch",
                       key["fp8"], fp8)
