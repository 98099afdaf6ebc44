"""A hand-written dynamic loss scaler, the same algorithm as `torch.amp.GradScaler`.

fp16 has 5 exponent bits: gradients below 2**-24 flush to zero. Multiplying the loss by a large
scale S lifts every gradient of the backward pass by S (the chain rule is linear), so small gradients
survive in fp16. Before the optimizer step the gradients are divided by S again. If S was too large,
some gradient overflows to inf or NaN: then the step is skipped and S is cut (backoff). After
`growth_interval` clean steps in a row, S is raised again (growth), to keep it as large as is safe.
"""
from __future__ import annotations

from typing import Iterable

import numpy as np
import torch


def _f32(x: float) -> float:
    """Round to the nearest float32, as the scale is stored in a float32 tensor by GradScaler."""
    with np.errstate(over="ignore"):  # a scale grown past fp32's range becomes inf, then is refused
        return float(np.float32(x))


class DynamicLossScaler:
    """scale(loss) -> backward -> step(optimizer) (unscale, inf check, maybe skip) -> update()."""

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000):
        if not init_scale > 0:
            raise ValueError(f"init_scale must be > 0, got {init_scale}")
        if not growth_factor > 1:
            raise ValueError(f"growth_factor must be > 1, got {growth_factor}")
        if not 0 < backoff_factor < 1:
            raise ValueError(f"backoff_factor must be in (0, 1), got {backoff_factor}")
        if growth_interval < 1:
            raise ValueError(f"growth_interval must be >= 1, got {growth_interval}")
        self.scale_value = _f32(init_scale)
        self.growth_factor = growth_factor
        self.backoff_factor = backoff_factor
        self.growth_interval = growth_interval
        self.growth_tracker = 0          # clean steps in a row since the last growth or backoff
        self.found_inf: bool | None = None  # set by unscale_, consumed by update
        self.history: list[float] = []   # the scale used at each step
        self.skipped: list[bool] = []    # whether each step was skipped

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        """loss * S: the backward pass then carries gradients multiplied by S."""
        return loss * self.scale_value

    def unscale_(self, params: Iterable[torch.Tensor]) -> bool:
        """Divide the gradients by S in place (multiplying by 1/S computed in fp64, rounded to fp32,
        as torch does) and return whether any gradient was inf or NaN."""
        grads = [p.grad for p in params if p.grad is not None]
        if not grads:
            self.found_inf = False
            return False
        with torch.no_grad():
            # One host sync for all the gradients, checked before they are rescaled.
            finite = torch.stack([torch.isfinite(g).all() for g in grads]).all()
            torch._foreach_mul_(grads, _f32(1.0 / self.scale_value))
        self.found_inf = not bool(finite)
        return self.found_inf

    def step(self, optimizer: torch.optim.Optimizer) -> bool:
        """Unscale (unless unscale_ was already called), then step unless a gradient overflowed.
        Returns whether the optimizer stepped."""
        if self.found_inf is None:
            self.unscale_(p for group in optimizer.param_groups for p in group["params"])
        if not self.found_inf:
            optimizer.step()
        return not self.found_inf

    def update(self) -> None:
        """Backoff on overflow; grow after `growth_interval` clean steps in a row."""
        if self.found_inf is None:
            raise RuntimeError("update() called before unscale_()/step() in this iteration")
        self.history.append(self.scale_value)
        self.skipped.append(self.found_inf)
        if self.found_inf:
            self.scale_value = _f32(self.scale_value * self.backoff_factor)
            self.growth_tracker = 0
        else:
            self.growth_tracker += 1
            if self.growth_tracker == self.growth_interval:
                grown = _f32(self.scale_value * self.growth_factor)
                if np.isfinite(grown):  # never grow past fp32's range; the count restarts anyway
                    self.scale_value = grown
                self.growth_tracker = 0
        self.found_inf = None

    def get_scale(self) -> float:
        return self.scale_value

    def state_dict(self) -> dict:
        return {"scale": self.scale_value, "growth_factor": self.growth_factor,
                "backoff_factor": self.backoff_factor, "growth_interval": self.growth_interval,
                "_growth_tracker": self.growth_tracker}
