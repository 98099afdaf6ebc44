"""Step the course's DynamicLossScaler and torch's GradScaler side by side, one event at a time.

Notebook 02's scaler widget: each click is one training step whose (scaled) gradient is either
finite or holds an inf. Both scalers see the same gradient on a one-parameter model; the widget plots
both scale histories, which must be identical.
"""
from __future__ import annotations

import math

import torch

from .scaler import DynamicLossScaler

EVENTS = ("clean", "inf", "nan")


class ScalerPair:
    """The course's scaler and torch's, driven by the same events ("clean", "inf" or "nan")."""

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 4) -> None:
        kw = dict(init_scale=init_scale, growth_factor=growth_factor, backoff_factor=backoff_factor,
                  growth_interval=growth_interval)
        self.course = DynamicLossScaler(**kw)          # validates the arguments (ValueError)
        self.torch = torch.amp.GradScaler("cpu", **kw)
        self._params = {k: torch.nn.Parameter(torch.ones(1)) for k in ("course", "torch")}
        self._opts = {k: torch.optim.SGD([p], lr=0.0) for k, p in self._params.items()}
        self.events: list[str] = []
        self.scales: dict[str, list[float]] = {"course": [self.course.get_scale()],
                                               "torch": [float(self.torch.get_scale())]}
        self.stepped: dict[str, list[bool]] = {"course": [], "torch": []}

    def step(self, event: str = "clean") -> dict[str, float]:
        """One step whose scaled gradient is 1 x scale ("clean"), inf or nan; returns the new scales."""
        if event not in EVENTS:
            raise ValueError(f"unknown event {event!r}; choose one of {EVENTS}")
        for name in ("course", "torch"):
            scaler, p, opt = getattr(self, name), self._params[name], self._opts[name]
            opt.zero_grad(set_to_none=True)
            scaler.scale(torch.ones(1))   # as a training step does first (torch's scaler starts lazily)
            scale = float(scaler.get_scale())
            p.grad = torch.full((1,), {"clean": scale, "inf": math.inf, "nan": math.nan}[event])
            before = float(scaler.get_scale())
            scaler.step(opt)
            scaler.update()
            after = float(scaler.get_scale())
            self.scales[name].append(after)
            self.stepped[name].append(not after < before)   # a skipped step is one that backed off
        self.events.append(event)
        return {k: v[-1] for k, v in self.scales.items()}

    def agree(self) -> bool:
        """Whether both scalers produced the same scale after every step so far."""
        return self.scales["course"] == self.scales["torch"]

    def growth_tracker(self) -> int:
        return self.course.growth_tracker


def explain_step(pair: ScalerPair) -> str:
    """One line on what the last step did to the scale, and whether the two scalers agree."""
    if not pair.events:
        return (f"Scale {pair.scales['course'][-1]:g} (2^{math.log2(pair.scales['course'][-1]):.0f}); "
                f"no step yet.")
    s0, s1 = pair.scales["course"][-2], pair.scales["course"][-1]
    ev = pair.events[-1]
    if s1 < s0:
        what = f"the gradient held {ev}: the step was skipped and the scale backed off from {s0:g} to {s1:g}"
    elif s1 > s0:
        what = (f"clean step number {pair.course.growth_interval} in a row: the scale grew from {s0:g} to "
                f"{s1:g}")
    else:
        what = (f"clean step: the optimizer stepped, the scale stays {s1:g} "
                f"({pair.growth_tracker()} of {pair.course.growth_interval} clean steps towards growth)")
    same = "the same scale" if pair.agree() else "DIFFERENT scales"
    return f"Step {len(pair.events)} ({ev}): {what}. torch's GradScaler and the course's scaler show {same}."
