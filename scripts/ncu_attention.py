"""Nsight Compute profile of the course's flash forward and cuDNN's, side by side (issue 26).

B4 H16 S4096 D128, causal, bf16: the Triton kernel at its chosen config (64 x 64 tiles, 4 warps,
3 stages, host TMA descriptors) and SDPA's cuDNN backend, each launched once between
cudaProfilerStart/Stop after warm-up. On the H200 (ncu ships with CUDA there):

    ncu --profile-from-start off --section SpeedOfLight --section WarpStateStats \
        --section SchedulerStats --section Occupancy --section LaunchStats \
        --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section InstructionStats \
        -o attn python scripts/ncu_attention.py
    ncu --import attn.ncu-rep --page details > attn-details.txt

Its tenth-session output is data/reference/h200/logs/ncu-attention-fwd-s10.txt.
"""
import torch
from course_kit.attention import sdpa_backends, triton_flash
from course_kit.attention.triton_flash import HOST_DESC
from course_kit.benchmarks.attention_steps import _inputs

q, k, v = _inputs(4, 16, 16, 4096, 128, torch.bfloat16, torch.device("cuda"), 0)
conf = {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3}
mine = lambda: triton_flash.launch_forward(q, k, v, causal=True, scale=None, desc=HOST_DESC, config=conf)[0]
cudnn = lambda: sdpa_backends.sdpa(q, k, v, backend="cudnn", causal=True)
for _ in range(3):
    mine(); cudnn()
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
mine(); cudnn()
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
print("done")
