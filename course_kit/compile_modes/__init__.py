"""torch.compile's modes: timing, graphs and breaks, recompiles, generated code, kernel counts.

Notebook 03 shows the sources of these modules; `course-kit bench compile` measures them on a GPU.
"""
from .codegen import bias_gelu_residual, eager_ops, fusion_summary, generated_code, kernel_names, kernel_source
from .graphs import DYNAMIC_CHOICES, compiles_fullgraph, count_compiles, graph_report
from .modes import GPU_MODES, MODES, ModeResult, check_mode, compile_with_mode, fresh_caches, measure_mode, measure_modes

__all__ = [
    "DYNAMIC_CHOICES", "GPU_MODES", "MODES", "ModeResult", "bias_gelu_residual", "check_mode",
    "compile_with_mode", "compiles_fullgraph", "count_compiles", "eager_ops", "fresh_caches",
    "fusion_summary", "generated_code", "graph_report", "kernel_names", "kernel_source", "measure_mode",
    "measure_modes",
]
