"""Graph capture four ways: torch.jit.trace, torch.jit.script, torch.fx.symbolic_trace, torch.export.

`capture(method, module, example)` captures one module; `compare()` runs every method on every
case below and reports what it really did (correct, silently wrong, refused at capture, failed at
run), so the notebook's comparison table is a measurement, not an opinion. The traps
(trace baking a branch, script refusing Python, export refusing data-dependent control flow and
its `torch.cond` fix) live in `capture_traps.py`.
"""
from __future__ import annotations

import os
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn
from torch.export import Dim
from torch.utils import _pytree as pytree

METHODS = ("jit.trace", "jit.script", "fx", "export")


# ---------------------------------------------------------------------------------------------
# The modules captured
# ---------------------------------------------------------------------------------------------
class MLPBlock(nn.Module):
    """A pre-norm transformer MLP with a residual: the kind of block every method captures."""

    def __init__(self, dim: int = 16, hidden: int = 64, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


class Gate(nn.Module):
    """Data-dependent control flow: which branch runs depends on the values in x."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return x * 2
        return -x


class RowLoop(nn.Module):
    """A Python loop whose trip count is the batch size."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([row.sum() * i for i, row in enumerate(x)])


class Containers(nn.Module):
    """Python containers: a dict in, a list inside, a dict out."""

    def forward(self, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        parts = [inputs["a"] * 2, inputs["b"] + 1]
        return {"sum": parts[0] + parts[1], "parts": torch.stack(parts)}


class PairScale(nn.Module):
    """Shape arithmetic: scale by 1/sqrt(length), then sum neighbouring pairs (length must be even)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length = x.shape
        return (x * length ** -0.5).reshape(batch, length // 2, 2).sum(-1)


class InPlace(nn.Module):
    """In-place ops, one of them on the caller's tensor."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.mul_(2)
        y = x.clone()
        y.add_(1).relu_()
        return y


class ClipOrScale(nn.Module):
    """The exercise's starting point: divide by the peak when it exceeds 1, else double.
    Its `if` depends on the data, so torch.export refuses it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        peak = x.abs().amax()
        if peak > 1.0:
            return x / peak
        return x * 2


# ---------------------------------------------------------------------------------------------
# Capturing
# ---------------------------------------------------------------------------------------------
@dataclass
class Captured:
    method: str
    obj: Any                                   # ScriptModule, GraphModule or ExportedProgram
    seconds: float
    warnings: list[str] = field(default_factory=list)

    @property
    def fn(self) -> Callable[..., Any]:
        """What to call: an ExportedProgram runs through `.module()`."""
        return self.obj.module() if self.method == "export" else self.obj


def capture(method: str, module: nn.Module, example: tuple, dynamic_shapes: Any = None) -> Captured:
    """Capture `module` with one method; every warning raised while capturing is kept."""
    if method not in METHODS:
        raise ValueError(f"unknown capture method {method!r}; choose one of {METHODS}")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.perf_counter()
        if method == "jit.trace":
            obj = torch.jit.trace(module, example)
        elif method == "jit.script":
            obj = torch.jit.script(module)
        elif method == "fx":
            obj = torch.fx.symbolic_trace(module)
        else:
            obj = torch.export.export(module, example, dynamic_shapes=dynamic_shapes)
        seconds = time.perf_counter() - start
    texts = [f"{w.category.__name__}: {w.message}" for w in caught]
    return Captured(method, obj, seconds, list(dict.fromkeys(texts)))


def first_line(err: BaseException, limit: int = 140) -> str:
    text = next((line.strip() for line in str(err).splitlines() if line.strip()), "")
    text = text.replace("\x1b[1m", "").replace("\x1b[0m", "")
    if len(text) > limit:   # at a word, marked: a reason cut mid-word reads as a typo
        text = text[:limit].rsplit(" ", 1)[0].rstrip(",;:") + " …"
    return f"{type(err).__name__}: {text}"


def _clone(args: Any) -> Any:
    return pytree.tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, args)


def same(a: Any, b: Any, atol: float = 1e-5) -> tuple[bool, float]:
    """Do two (nested) outputs match? Returns (match, max |difference|)."""
    la, sa = pytree.tree_flatten(a)
    lb, sb = pytree.tree_flatten(b)
    if sa != sb or len(la) != len(lb):
        return False, float("inf")
    worst = 0.0
    for x, y in zip(la, lb):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.shape != y.shape:
                return False, float("inf")
            worst = max(worst, (x.double() - y.double()).abs().max().item() if x.numel() else 0.0)
        elif x != y:
            return False, float("inf")
    return worst <= atol, worst


# ---------------------------------------------------------------------------------------------
# The comparison, produced by running each capture
# ---------------------------------------------------------------------------------------------
@dataclass
class Case:
    name: str
    make: Callable[[], nn.Module]
    example: Callable[[], tuple]                 # arguments used to capture
    probes: Callable[[], list[tuple]]            # arguments the capture is then run on
    dynamic_shapes: Any = None                   # for export
    note: str = ""


def _g(seed: int, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


CASES = [
    Case("data-dependent control flow", Gate, lambda: (_g(0, 4, 8).abs(),),
         lambda: [(_g(1, 4, 8).abs(),), (-_g(2, 4, 8).abs(),)], ({0: Dim("batch")},),
         "captured with a positive-sum input, run on one of each sign"),
    Case("Python loop over the batch", RowLoop, lambda: (_g(0, 4, 8),),
         lambda: [(_g(1, 4, 8),), (_g(2, 6, 8),)], ({0: Dim("batch")},),
         "captured with batch 4, run with batch 4 and 6"),
    Case("Python containers (dict in, dict out)", Containers,
         lambda: ({"a": _g(0, 3), "b": _g(1, 3)},), lambda: [({"a": _g(2, 3), "b": _g(3, 3)},)], None,
         "a dict input, a list inside, a dict output"),
    Case("dynamic shapes (new batch and length)", PairScale, lambda: (_g(0, 4, 8),),
         lambda: [(_g(1, 3, 6),), (_g(2, 5, 12),)], ({0: Dim("batch"), 1: 2 * Dim("half")},),
         "captured at [4, 8], run at [3, 6] and [5, 12]; export declares batch and length = 2 * half"),
    Case("in-place ops (one on the input)", InPlace, lambda: (_g(0, 4, 8),),
         lambda: [(_g(1, 4, 8),)], None, "output and the caller's mutated tensor both compared"),
]


@dataclass
class Cell:
    status: str          # "correct", "silently wrong", "refused", "fails at run"
    detail: str

    @property
    def symbol(self) -> str:
        return {"correct": "✅", "silently wrong": "⚠️", "refused": "❌", "fails at run": "❌"}[self.status]


def probe(method: str, case: Case) -> Cell:
    """Capture the case's module with one method, run it on the probes, compare with eager."""
    module = case.make().eval()
    try:
        cap = capture(method, module, _clone(case.example()),
                      case.dynamic_shapes if method == "export" else None)
    except Exception as err:  # the capture refused: that is the finding
        return Cell("refused", first_line(err))
    warned = [w.split(":")[0] for w in cap.warnings if "Deprecat" not in w.split(":")[0]]
    for args in case.probes():
        eager_args, cap_args = _clone(args), _clone(args)
        expected = module(*eager_args)
        try:
            got = cap.fn(*cap_args)
        except Exception as err:
            return Cell("fails at run", first_line(err))
        ok_out, diff = same(expected, got)
        ok_args, _ = same(eager_args, cap_args)
        if not (ok_out and ok_args):
            what = "output" if not ok_out else "mutation of the input"
            extra = f" (after a {warned[0]})" if warned else " (no warning)"
            return Cell("silently wrong", f"{what} differs from eager, max |Δ| = {diff:.3g}{extra}")
    return Cell("correct", f"matches eager on {len(case.probes())} probe(s)" + (f"; warned: {warned[0]}" if warned else ""))


def save_load(method: str, module: nn.Module, example: tuple, folder: str | None = None,
              dynamic_shapes: Any = None) -> Cell:
    """Save the capture (.pt or .pt2), load it back, and compare the loaded one with eager.
    Without `folder` the files go to a temporary folder that is removed afterwards."""
    if folder is None:
        with tempfile.TemporaryDirectory(prefix="capture-") as tmp:
            return save_load(method, module, example, tmp, dynamic_shapes)
    try:
        cap = capture(method, module, example, dynamic_shapes if method == "export" else None)
        if method in ("jit.trace", "jit.script"):
            path = os.path.join(folder, f"{method.replace('.', '_')}.pt")
            torch.jit.save(cap.obj, path)
            loaded = torch.jit.load(path)
        elif method == "fx":  # a GraphModule pickles its Python code: only for files you trust
            path = os.path.join(folder, "fx.pt")
            torch.save(cap.obj, path)
            loaded = torch.load(path, weights_only=False)
        else:
            path = os.path.join(folder, "export.pt2")
            torch.export.save(cap.obj, path)
            loaded = torch.export.load(path).module()
        ok, diff = same(module(*example), loaded(*example), atol=0.0)
    except Exception as err:
        return Cell("fails at run", "save/load failed: " + first_line(err))
    size_kb = os.path.getsize(path) / 1024
    note = f"{os.path.basename(path)}, {size_kb:.1f} KiB, max |Δ| = {diff:.3g}"
    if method == "fx":
        note += " (pickle: needs weights_only=False)"
    return Cell("correct" if ok else "silently wrong", note)


def ir_text(cap: Captured, lines: int | None = None) -> str:
    """The captured program as text: TorchScript IR (jit, submodules inlined), an FX graph, or an
    ATen-level graph (export). With `lines`, an excerpt of the operator lines only: constants,
    attribute reads, inputs and source-location comments left out."""
    graph = cap.obj.inlined_graph if cap.method.startswith("jit") else cap.obj.graph
    text = str(graph)
    if lines is None:
        return text
    keep = []
    for line in text.splitlines():
        if any(skip in line for skip in ("prim::Constant", "prim::GetAttr", "placeholder", "get_attr[")):
            continue
        line = line.split(", scope:")[0].split(" # ")[0].rstrip()
        if line.strip() and not line.startswith(("graph(", "graph():")) and not line.startswith("      %"):
            keep.append(line)
    return "\n".join(keep[:lines])


def ir_ops(cap: Captured) -> list[str]:
    """The operators in the captured graph, in order (placeholders and outputs left out)."""
    if cap.method in ("jit.trace", "jit.script"):
        return [n.kind() for n in cap.obj.inlined_graph.nodes() if not n.kind().startswith("prim::")]
    graph = cap.obj.graph
    out = []
    for node in graph.nodes:
        if node.op in ("call_function", "call_method", "call_module"):
            target = node.target
            out.append(target if isinstance(target, str) else getattr(target, "__name__", str(target)))
    return out


def compare(methods: tuple[str, ...] = METHODS, dim: int = 16) -> list[dict]:
    """The comparison table: one row per case (plus IR and save/load), one column per method."""
    rows = []
    for case in CASES:
        rows.append({"case": case.name, "note": case.note, **{m: probe(m, case) for m in methods}})
    block, x = MLPBlock(dim).eval(), _g(0, 4, dim)
    dyn = ({0: Dim("batch")},)
    rows.append({"case": "save / load round trip", "note": "MLP block, loaded copy compared bit for bit",
                 **{m: save_load(m, block, (x,), dynamic_shapes=dyn) for m in methods}})
    ir_row = {"case": "what the IR looks like", "note": "MLP block: operators in the captured graph"}
    for m in methods:
        try:
            cap = capture(m, block, (x,), dyn if m == "export" else None)
            names = ir_ops(cap)
            ir_row[m] = Cell("correct", f"{len(names)} ops: " + ", ".join(list(dict.fromkeys(names))[:4]))
        except Exception as err:
            ir_row[m] = Cell("refused", first_line(err))
    rows.append(ir_row)
    return rows


def measure(dim: int = 64, batch: int = 32, repeat: int = 20, methods: tuple[str, ...] = METHODS) -> list[dict]:
    """Capture time, and the median time of one call of each captured MLP block against eager."""
    from .. import bench
    block, x = MLPBlock(dim).eval(), _g(0, batch, dim)
    inputs = [(_g(seed, batch, dim),) for seed in range(4)]
    with torch.no_grad():
        eager = bench.timeit(block, inputs=inputs, repeat=repeat)
        rows = [{"method": "eager", "capture_s": 0.0, "call_us": eager.median_s * 1e6, "vs_eager": 1.0}]
        for m in methods:
            cap = capture(m, block, (x,), ({0: Dim("batch")},) if m == "export" else None)
            t = bench.timeit(cap.fn, inputs=inputs, repeat=repeat)
            rows.append({"method": m, "capture_s": cap.seconds, "call_us": t.median_s * 1e6,
                         "vs_eager": eager.median_s / t.median_s})
    return rows
