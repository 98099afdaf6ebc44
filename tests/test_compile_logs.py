"""TORCH_LOGS="graph_breaks,recompiles", captured in-process: the lines come back, stderr stays clean."""
from __future__ import annotations

import torch

from course_kit.compile_modes import graphs
from course_kit.profiling import compile_logs


def test_graph_breaks_and_recompiles_are_captured_not_printed(capfd):
    torch._dynamo.reset()
    with compile_logs.captured() as lines:
        f = torch.compile(graphs.forward_with_branch, backend="eager")
        f(torch.randn(8, 16), torch.randn(16, 4))
        g = torch.compile(graphs.mlp_block, backend="eager", dynamic=False)
        g(torch.randn(4, 8))
        g(torch.randn(6, 8))
    text = "\n".join(lines)
    assert "[graph_breaks]" in text and "forward_with_branch" in text
    assert "[recompiles]" in text and "mlp_block" in text
    err = capfd.readouterr().err
    assert "Graph break" not in err and "Recompiling" not in err
    after = [h for lg in compile_logs._torch_loggers() for h in lg.handlers]
    assert after and not any(isinstance(h, compile_logs._Keep) for h in after)   # torch's own handlers back
    assert compile_logs.as_block(["a", "b", "c"], limit=2) == "a\nb\n... 1 more lines"
    short = compile_logs.essentials(lines)
    assert short and len(short) < len(lines) and any("Graph break in user code" in x for x in short)
    assert all(x.strip() != "[graph_breaks]" for x in short)
