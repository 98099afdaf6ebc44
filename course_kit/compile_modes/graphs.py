"""What TorchDynamo captured: graphs and graph breaks, and recompiles when shapes change."""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F

DYNAMIC_CHOICES = ("static", "automatic", "dynamic", "mark_dynamic")


def graph_report(fn: Callable, *args: Any) -> dict:
    """Graphs, graph breaks, captured ops and the break reasons, from `torch._dynamo.explain`."""
    torch._dynamo.reset()
    ex = torch._dynamo.explain(fn)(*args)
    reasons = []
    for b in ex.break_reasons:
        where = ""
        if getattr(b, "user_stack", None):
            frame = b.user_stack[-1]
            where = f" ({frame.name}, line {frame.lineno})"
        reasons.append(f"{b.reason.strip().splitlines()[0]}{where}")
    return {"graphs": ex.graph_count, "graph_breaks": ex.graph_break_count, "ops": ex.op_count,
            "break_reasons": reasons}


def count_compiles(fn: Callable, shapes: Sequence[tuple[int, ...]], dynamic: str = "automatic") -> dict:
    """Call `fn` on fresh inputs of each shape and count how many times Dynamo compiled it.

    dynamic: "static" (dynamic=False: one graph per shape), "automatic" (the default: the second
    distinct shape recompiles once with a symbolic size), "dynamic" (dynamic=True from the start), or
    "mark_dynamic" (torch._dynamo.mark_dynamic on dim 0 of each input)."""
    if dynamic not in DYNAMIC_CHOICES:
        raise ValueError(f"unknown dynamic choice {dynamic!r}; valid choices: {list(DYNAMIC_CHOICES)}")
    from torch._dynamo.testing import CompileCounter  # a backend that counts and runs the graph eagerly
    torch._dynamo.reset()
    counter = CompileCounter()
    flag = {"static": False, "automatic": None, "dynamic": True, "mark_dynamic": None}[dynamic]
    compiled = torch.compile(fn, backend=counter, dynamic=flag)
    per_call = []
    for i, shape in enumerate(shapes):
        x = torch.randn(shape, generator=torch.Generator().manual_seed(i))
        if dynamic == "mark_dynamic":
            torch._dynamo.mark_dynamic(x, 0)
        before = counter.frame_count
        compiled(x)
        per_call.append(counter.frame_count - before)
    return {"dynamic": dynamic, "shapes": [list(s) for s in shapes], "compiles": counter.frame_count,
            "compiled_on_call": per_call}


# Small functions the notebook and its exercise compile ------------------------------------------

def mlp_block(x: torch.Tensor) -> torch.Tensor:
    """A shape-polymorphic function for the recompile demonstration."""
    h = F.gelu(x @ x.T / x.shape[-1])
    return (h @ x).softmax(-1)


def forward_with_print(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = torch.relu(x @ w)
    print("mean activation:", h.mean())    # a print forces a graph break
    return h @ w.T


def forward_with_branch(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = torch.relu(x @ w)
    print("mean activation:", float(h.mean()))  # a print of a tensor value: graph break
    if h.mean() > 1.0:                           # a Python `if` on a tensor value: graph break
        h = h / h.mean()
    return h @ w.T


def compiles_fullgraph(fn: Callable, *args: Any) -> tuple[bool, str]:
    """Whether `fn` compiles as one graph (fullgraph=True, eager backend so it is fast); and the error."""
    torch._dynamo.reset()
    try:
        torch.compile(fn, fullgraph=True, backend="eager")(*args)
    except Exception as err:  # noqa: BLE001 - the error text is what we report
        return False, f"{type(err).__name__}: {str(err).strip().splitlines()[0]}"
    return True, ""
