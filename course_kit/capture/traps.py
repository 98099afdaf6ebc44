"""The traps of graph capture, each shown by running it.

- `trace_bakes_branch`: torch.jit.trace records the branch its example took, and replays it for
  every input, silently.
- `script_rejects`: torch.jit.script compiles a subset of Python and refuses the rest.
- `export_refuses_data_dependent` / `export_with_cond`: torch.export won't guess a data-dependent
  branch; torch.cond puts both branches in the graph.
- `export_dim_constraint`: export checks what a dynamic dimension may be, and says how to declare it.
- `torchscript_deprecation`: the warnings torch emits for TorchScript, if any.
"""
from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import nn
from torch.export import Dim

from .methods import Gate, PairScale, capture, first_line, same


def trace_bakes_branch(batch: int = 4, width: int = 8) -> dict:
    """Trace Gate with a positive-sum input, then run it on a negative-sum one."""
    gen = torch.Generator().manual_seed(0)
    positive = torch.rand(batch, width, generator=gen) + 0.1
    negative = -positive
    cap = capture("jit.trace", Gate(), (positive,))
    eager, traced = Gate()(negative), cap.fn(negative)
    ok, diff = same(eager, traced)
    return {"warnings": [w for w in cap.warnings if w.startswith("TracerWarning")],
            "code": cap.obj.code, "matches_eager": ok, "max_abs_diff": diff,
            "eager_sum": eager.sum().item(), "traced_sum": traced.sum().item()}


class TryExcept(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        try:
            return x.relu()
        except RuntimeError:
            return x


class KeywordOptions(nn.Module):
    def forward(self, x: torch.Tensor, **options: float) -> torch.Tensor:
        return x * options.get("scale", 1.0)


class Closure(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = lambda t: t * 2  # noqa: E731
        return scale(x)


def script_rejects() -> list[dict]:
    """Script three modules that use Python TorchScript doesn't support; collect the errors."""
    out = []
    for module in (TryExcept(), KeywordOptions(), Closure()):
        try:
            torch.jit.script(module)
            out.append({"module": type(module).__name__, "scripted": True, "error": ""})
        except Exception as err:
            out.append({"module": type(module).__name__, "scripted": False, "error": first_line(err, 200)})
    return out


def export_refuses_data_dependent(batch: int = 4, width: int = 8) -> dict:
    """torch.export on Gate: the branch depends on data, so export stops and says where."""
    x = torch.rand(batch, width) + 0.1
    try:
        capture("export", Gate(), (x,))
        return {"refused": False, "error": ""}
    except Exception as err:
        return {"refused": True, "error": first_line(err, 240), "type": type(err).__name__}


class GateCond(nn.Module):
    """Gate with both branches in the graph: torch.cond picks one at run time."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.sum() > 0, lambda t: t * 2, lambda t: -t, (x,))


def export_with_cond(batch: int = 4, width: int = 8) -> dict:
    """Export GateCond with a dynamic batch; check both branches and another batch size."""
    gen = torch.Generator().manual_seed(1)
    x = torch.rand(batch, width, generator=gen) + 0.1
    cap = capture("export", GateCond(), (x,), ({0: Dim("batch")},))
    checks = {}
    for name, probe in {"positive": x, "negative": -x,
                        f"negative, batch {batch + 3}": -torch.rand(batch + 3, width, generator=gen)}.items():
        checks[name] = same(Gate()(probe), cap.fn(probe))[0]
    return {"code": cap.obj.graph_module.code, "checks": checks, "seconds": cap.seconds}


def export_dim_constraint(batch: int = 4, length: int = 8) -> dict:
    """PairScale reshapes length into pairs: a plain Dim for length is refused, 2 * Dim is accepted."""
    x = torch.randn(batch, length)
    out: dict[str, Any] = {}
    try:
        capture("export", PairScale(), (x,), ({0: Dim("batch"), 1: Dim("length")},))
        out["plain_dim"] = "accepted"
    except Exception as err:
        out["plain_dim"] = first_line(err, 200)
        text = str(err)
        fixes = text.split("Suggested fixes:", 1)[1].strip().split("\n\n")[0] if "Suggested fixes:" in text else ""
        out["suggested"] = [line.strip() for line in fixes.splitlines() if line.strip()]
    cap = capture("export", PairScale(), (x,), ({0: Dim("batch"), 1: 2 * Dim("half")},))
    y = torch.randn(batch + 1, length + 4)
    out["derived_dim_ok"] = same(PairScale()(y), cap.fn(y))[0]
    return out


def torchscript_deprecation() -> dict:
    """Run jit.trace and jit.script on a tiny module and keep the deprecation warnings they emit."""
    module, x = Gate(), torch.rand(2, 3) + 0.1
    found = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.jit.trace(module, (x,))
        torch.jit.script(module)
    for w in caught:
        text = str(w.message)
        if issubclass(w.category, (DeprecationWarning, FutureWarning)) or "deprecat" in text.lower():
            found.append(f"{w.category.__name__}: {text}")
    return {"torch": torch.__version__, "warnings": list(dict.fromkeys(found))}


class CountCalls(nn.Module):
    """Multiplies by the number of calls so far: a Python counter kept on the module (notebook 04's
    exercise 04.silent_trap; the gallery does not show it)."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return x * self.calls


def counter_trap() -> Any:
    """CountCalls as a capture.Case: captured once from an example, then run on two new inputs."""
    from .methods import Case

    def randn(seed: int, *shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))
    return Case("a counter kept on the module", CountCalls, lambda: (randn(0, 4, 8),),
                lambda: [(randn(1, 4, 8),), (randn(2, 6, 8),)], ({0: Dim("batch")},),
                "captured once, then called on two new inputs")
