"""torch.compile's modes: timing, graphs and breaks, recompiles, generated code, kernel counts.

Notebook 03 shows the sources of these modules; `course-kit bench compile` measures them on a GPU.

Modules:

    autotune        What `max-autotune` chose: the candidates Inductor benchmarked per matmul, and the ...
    breakeven       When does compiling pay? Compile time against the time saved per call, and the ...
    codegen         The code Inductor generates for a fused elementwise chain (Triton on a GPU, C++ on a ...
    explain         Where a compiled training step's time goes against its peer, from the bench record's ...
    kernels         Kernels launched per call, from the profiler (GPU), and the top kernels for ...
    workloads       The two GPU workloads of `course-kit bench compile`: a batch-1 decode step and a ...
"""
from .codegen import bias_gelu_residual, eager_ops, fusion_summary, generated_code, kernel_names, kernel_source
from .graphs import DYNAMIC_CHOICES, compiles_fullgraph, count_compiles, graph_report
from .modes import (GPU_MODES, MODES, ModeResult, cache_at, check_mode, compile_with_mode, fresh_caches, measure_mode,
                    measure_modes)

__all__ = [
    "DYNAMIC_CHOICES", "GPU_MODES", "MODES", "ModeResult", "bias_gelu_residual", "cache_at", "check_mode",
    "compile_with_mode", "compiles_fullgraph", "count_compiles", "eager_ops", "fresh_caches",
    "fusion_summary", "generated_code", "graph_report", "kernel_names", "kernel_source", "measure_mode",
    "measure_modes",
]
