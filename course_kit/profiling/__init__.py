"""The profiler as the course's instrument: what the GPU did, and when it waited (DESIGN.md).

- `intervals`: the one GPU-idle arithmetic (union of kernel and copy intervals over a window), and
  its split into idle between steps and idle within steps; pure, tested on synthetic intervals;
- `trace`: reading a torch.profiler Chrome trace into activities, steps and a summary (idle, kernels
  per step, launch gaps, top kernels);
- `capture`: profiling a run in a pass of its own, with the profiler's overhead beside it;
- `files`: the compressed traces kept next to the records, for Perfetto;
- `explain`: what a profiled run shows, in words that follow its numbers;
- `step_table`: one decode step as a table of kernels (notebook 05's exercise 05.read_trace);
- `step_gaps`: the idle inside steps split into each step's largest gap and the small gaps between
  kernels, with the host call the GPU waited on (notebook 07);
- `breakdown`: a profiled window of engine steps cut into shares: kernel kinds, launch gaps, host gaps;
- `memory`: what holds a training step's peak GPU memory, from a `torch.cuda.memory` snapshot;
- `quiet`: whether the GPU is alone for a recording (nvidia-smi), and one recording at a time;
- `compile_logs`: `TORCH_LOGS` output (graph breaks, recompiles) captured in-process, not on stderr.
"""
from .intervals import idle_fraction, split_idle, union
from .trace import CPU_OP_METHOD, GPU_IDLE_METHOD, summarize
from .capture import Profile, profile_run, profile_steps, quiet_stderr, record_fields

__all__ = ["idle_fraction", "split_idle", "union", "summarize", "GPU_IDLE_METHOD", "CPU_OP_METHOD",
           "Profile", "profile_run", "profile_steps", "quiet_stderr", "record_fields"]
