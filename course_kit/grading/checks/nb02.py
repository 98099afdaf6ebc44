"""Checks for notebook 02 (AMP and GradScaler)."""
from __future__ import annotations

from typing import Callable

import torch

from .. import exercise

# Overflow pattern: backoffs, growth after clean runs, a growth right after a backoff, long clean runs.
_PATTERN = [True, True, False, False, False, True, False, False, False, False, False, False, True,
            False, False, False, False, False, False, False, False]


def _torch_rule(scale: float, tracker: int, found_inf: bool, growth: float, backoff: float,
                interval: int) -> tuple[float, int]:
    """torch's own update (the op GradScaler.update calls) on CPU tensors: the oracle."""
    s = torch.tensor([scale], dtype=torch.float32)
    t = torch.tensor([tracker], dtype=torch.int32)
    torch._amp_update_scale_(s, t, torch.tensor([1.0 if found_inf else 0.0]), growth, backoff, interval)
    return float(s), int(t)


@exercise("02.scaler_update")
def check_scaler_update(update: Callable) -> None:
    """`update(scale, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval)` must
    return (new_scale, new_growth_tracker) exactly as torch.amp.GradScaler does."""
    for init, growth, backoff, interval in ((2.0**16, 2.0, 0.5, 3), (1024.0, 4.0, 0.25, 2), (2.0**127, 2.0, 0.5, 1)):
        ours, ref = (init, 0), (init, 0)
        for step, found in enumerate(_PATTERN):
            got = update(ours[0], ours[1], found, growth, backoff, interval)
            if not (isinstance(got, tuple) and len(got) == 2):
                raise AssertionError(f"expected a tuple (new_scale, new_growth_tracker), found {got!r}")
            ref = _torch_rule(*ref, found, growth, backoff, interval)
            if float(got[0]) != ref[0] or int(got[1]) != ref[1]:
                raise AssertionError(
                    f"step {step} (found_inf={found}, growth_interval={interval}, growth_factor={growth}, "
                    f"backoff_factor={backoff}, starting scale {init}): expected (scale, tracker) = {ref}, "
                    f"found {(float(got[0]), int(got[1]))}")
            ours = (float(got[0]), int(got[1]))
