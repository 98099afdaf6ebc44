"""The course's inference engine (notebook 06): paged KV cache, three batching policies, serving.

    sequence       a request: its tokens, sampling parameters, status and timings
    config         EngineConfig: every engine option, passed whole to the scheduler and the runner
    block_manager  which KV blocks each request owns (alloc, free, prefix sharing, invariants)
    scheduler      static, dynamic and continuous batching; the admission rule; preemption
    model_runner   scheduled step -> tensors -> model over the paged cache -> tokens; CUDA graphs
    engine         the front: add requests, step, generate a workload, per-request timings
    metrics        throughput, TTFT, TPOT, latency percentiles, padding waste, slot occupancy
    trace          synthetic workloads, Poisson arrivals, recorded traces in data/traces/

Attention (the paged kernels, decode and prefill) is in `course_kit.attention` (engine_step,
paged_triton); the runner hands it to the model with `model.set_attention(paged=...)`.
"""
from .block_manager import BlockManager  # noqa: F401
from .config import EngineConfig  # noqa: F401
from .engine import Engine  # noqa: F401
from .metrics import RequestOutput, StepRecord, summarize  # noqa: F401
from .scheduler import POLICIES, Scheduler, admit  # noqa: F401
from .sequence import SamplingParams, Sequence, Status  # noqa: F401
