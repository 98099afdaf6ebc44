"""Checks for notebook 00 (the roofline).

- 00.decode_batch: predict, then measure with the course's roofline functions, the smallest batch at
  which a decode step's matrix-vector product becomes compute-bound on the H200 datasheet roofline;
  then say what fp8 (1 byte per element, twice the peak) does to that batch.
"""
from __future__ import annotations

from course_kit import grading
from course_kit.grading.checks import feedback

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


def crossing_batch(dtype: str = "bf16", n: int = N, limit: int = 1 << 16) -> int:
    """The smallest batch that is compute-bound (the oracle), by the course's op_cost and place."""
    for b in range(1, limit):
        if is_compute_bound(b, dtype, n):
            return b
    raise RuntimeError(f"no batch below {limit} is compute-bound for {dtype} at n = {n}")


def fp8_answer() -> str:
    b16, b8 = crossing_batch("bf16"), crossing_batch("fp8")
    r = b8 / b16
    return "B" if abs(r - 1) < 0.1 else "A" if r < 0.75 else "C" if r < 3 else "D"


HINT = """Measure with the functions behind the explorer: spec = device.peaks("H200"); cost =
roofline.op_cost("matrix-vector (decode, n x n weights)", 8192, "bf16", batch); then
roofline.place(cost, spec.hbm_gbs, {"bf16": spec.tflops("bf16")})["bound"], for batch = 1, 2, ...
The weights are read once for the whole batch, but the activations grow with it: the batch needed is
not exactly the ridge. For fp8, compare how the intensity and the ridge both change."""


def _int(found, what: str) -> int:
    if isinstance(found, bool) or not isinstance(found, int):
        raise grading.Wrong(f"{what}: expected an int, found {feedback.describe(found)}")
    return found


@grading.exercise("00.decode_batch", hint=HINT)
def decode_batch(predicted, batch, fp8) -> None:
    """predicted: the batch guessed before measuring (recorded, not graded); batch: the smallest
    compute-bound batch; fp8: a letter."""
    _int(predicted, "PREDICTED_BATCH (recorded, not graded)")
    b = _int(batch, "BATCH")
    want = crossing_batch()
    if b < 1 or not is_compute_bound(b):
        raise grading.Wrong(f"BATCH: at batch {b} the product is still memory-bound on the {GPU} datasheet roofline",
                            expected=want)
    grading.expect(b == want, f"BATCH: batch {b} is compute-bound, but it is not the smallest such batch", want, b)
    if not (isinstance(fp8, str) and fp8.strip().upper() in CHOICES):
        raise grading.Wrong(f"FP8: expected one of {', '.join(map(repr, CHOICES))}, found {fp8!r}"[:200])
    grading.expect(fp8.strip().upper() == fp8_answer(), "FP8: that is not what fp8 does to the batch", fp8_answer(), fp8)
