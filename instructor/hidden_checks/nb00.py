"""The answer key of notebook 00 (its public checker, course_kit/grading/checks/nb00.py, checks BATCH
by what it must be and FP8's form only)."""
from __future__ import annotations

from course_kit import grading

# ---- 00.decode_batch ---
# H200 datasheet: 989.5 TFLOP/s bf16 (1979 fp8), 4800 GB/s: the ridge is 989.5e12 / 4.8e12 = 206.15
# FLOP/byte (fp8: twice the peak over the same bandwidth, 412.3). The decode matrix-vector product at
# batch b with n x n weights does 2 n^2 b FLOPs and moves the weights once plus b input and b output
# vectors: bf16 2 n^2 + 4 n b bytes, intensity b / (1 + 2 b / n); compute-bound from
# b >= 206.15 / (1 - 2 x 206.15 / 8192) = 217.1, so BATCH = 218. fp8 halves every byte and doubles
# the peak: intensity 2 b / (1 + 2 b / n) against a ridge of 412.3, the same inequality: the batch
# stays the same (B). tests/test_answer_keys.py measures both with roofline.op_cost and place.
grading.answer_key("00.decode_batch", batch=218, fp8="B")
