"""Nsight Compute profile of the Gluon forward (gluon_flash.py) at the acceptance shape, causal and not.

    ncu --profile-from-start off --section SpeedOfLight --section WarpStateStats --section SchedulerStats \\
        --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis -o gl python scripts/ncu_gluon_attention.py
    ncu --import gl.ncu-rep --page details > gl-details.txt
"""
import torch
from course_kit.attention import gluon_flash
from course_kit.benchmarks.attention_steps import _inputs

q, k, v = _inputs(4, 16, 16, 4096, 128, torch.bfloat16, torch.device("cuda"), 0)
runs = [lambda: gluon_flash.gluon_flash_attention(q, k, v, causal=True),
        lambda: gluon_flash.gluon_flash_attention(q, k, v, causal=False)]
for _ in range(3):
    for r in runs:
        r()
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
for r in runs:
    r()
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
print("done")
