"""Checks of notebook 04 (graph capture): make a module exportable."""
from __future__ import annotations

from typing import Any

import torch

from course_kit import grading


def _module(candidate: Any) -> torch.nn.Module:
    module = candidate() if isinstance(candidate, type) else candidate
    grading.expect(isinstance(module, torch.nn.Module), "your answer", "an nn.Module class or instance",
                   type(module).__name__)
    return module.eval()


def _compare(what: str, got: torch.Tensor, want: torch.Tensor) -> None:
    grading.expect(isinstance(got, torch.Tensor), what, "a tensor", type(got).__name__)
    grading.expect(got.shape == want.shape, f"{what}: shape", tuple(want.shape), tuple(got.shape))
    close = torch.allclose(got, want, atol=1e-6, rtol=1e-5)
    grading.expect(close, what, "the values of ClipOrScale",
                   f"max |difference| {(got - want).abs().max().item():.3g}")


def _export(module: torch.nn.Module, example: torch.Tensor):
    from torch.export import Dim
    try:
        return torch.export.export(module, (example,), dynamic_shapes=({0: Dim("batch")},))
    except Exception as err:
        first = next((line for line in str(err).splitlines() if line.strip()), "")
        raise AssertionError(
            "torch.export.export(module, (x,), dynamic_shapes=({0: Dim('batch')},)): expected it to "
            f"export, found {type(err).__name__}: {first[:200]} (hint: torch.cond or torch.where "
            "keep both branches in the graph)") from None


def _cases(seed: int, batch: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {f"peak below 1 (batch {batch})": torch.rand(batch, 8, generator=gen) * 0.9,
            f"peak above 1 (batch {batch})": torch.randn(batch, 8, generator=gen) * 3 + 0.5}


@grading.exercise("04.exportable")
def check_exportable(candidate: Any) -> None:
    from course_kit.capture import ClipOrScale
    module, reference = _module(candidate), ClipOrScale()
    for name, x in _cases(0, 4).items():
        _compare(f"eager output, {name}", module(x.clone()), reference(x))
    program = _export(module, _cases(1, 4)["peak above 1 (batch 4)"])
    for name, x in _cases(2, 6).items():
        _compare(f"exported program's output, {name}", program.module()(x.clone()), reference(x))


@grading.exercise("04.exportable_hidden")
def check_exportable_hidden(candidate: Any) -> None:
    from course_kit.capture import ClipOrScale
    module, reference = _module(candidate), ClipOrScale()
    # exported from an input that takes the *other* branch than most probes
    program = _export(module, _cases(3, 5)["peak below 1 (batch 5)"])
    edge = torch.full((3, 8), 0.5)
    edge[1, 2] = -1.0  # a peak of exactly 1: not above 1, so doubled
    probes = {**_cases(4, 9), "peak exactly 1": edge, "all zeros": torch.zeros(2, 8)}
    for name, x in probes.items():
        _compare(f"exported program's output, {name}", program.module()(x.clone()), reference(x))
