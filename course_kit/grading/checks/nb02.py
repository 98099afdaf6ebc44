"""Checks for notebook 02 (AMP and GradScaler)."""
from __future__ import annotations

import torch

from course_kit import grading

# Overflow pattern: backoffs, growth after clean runs, a growth right after a backoff, long clean runs.
_PATTERN = [True, True, False, False, False, True, False, False, False, False, False, False, True,
            False, False, False, False, False, False, False, False]
_CONFIGS = ((2.0**16, 2.0, 0.5, 3), (1024.0, 4.0, 0.25, 2), (2.0**127, 2.0, 0.5, 1))


def torch_rule(scale: float, tracker: int, found_inf: bool, growth: float, backoff: float,
               interval: int) -> tuple[float, int]:
    """torch's own update (the op GradScaler.update calls) on CPU tensors: the oracle."""
    s = torch.tensor([scale], dtype=torch.float32)
    t = torch.tensor([tracker], dtype=torch.int32)
    torch._amp_update_scale_(s, t, torch.tensor([1.0 if found_inf else 0.0]), growth, backoff, interval)
    return float(s), int(t)


def _cases() -> list[tuple]:
    """Each step of torch's own trajectory, as (scale, tracker, found_inf, growth, backoff, interval)."""
    cases = []
    for init, growth, backoff, interval in _CONFIGS:
        state = (init, 0)
        for found in _PATTERN:
            cases.append((state[0], state[1], found, growth, backoff, interval))
            state = torch_rule(*state, found, growth, backoff, interval)
    return cases


HINT = """On an overflow (found_inf) multiply the scale by backoff_factor and reset the tracker to 0.
Otherwise count one more clean step; when the count reaches growth_interval, multiply the scale by
growth_factor and reset the count. torch keeps the scale in fp32: round the product to float32, and
keep the old scale if growing would overflow to inf."""


@grading.exercise("02.scaler_update", cases=_cases, hint=HINT)
def check_scaler_update(update) -> None:
    """`update(scale, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval)` must
    return (new_scale, new_growth_tracker) exactly as torch.amp.GradScaler does."""
    for scale, tracker, found, growth, backoff, interval in _cases():
        got = update(scale, tracker, found, growth, backoff, interval)
        where = (f"update(scale={scale:g}, tracker={tracker}, found_inf={found}, growth_factor={growth:g}, "
                 f"backoff_factor={backoff:g}, growth_interval={interval})")
        if not (isinstance(got, tuple) and len(got) == 2):
            raise grading.Wrong(f"{where}: expected a tuple (new_scale, new_growth_tracker), found "
                                f"{type(got).__name__}")
        ref = torch_rule(scale, tracker, found, growth, backoff, interval)
        grading.expect(isinstance(got[0], (int, float)) and float(got[0]) == ref[0],
                       f"{where}: the new scale is wrong", ref[0], got[0])
        grading.expect(isinstance(got[1], int) and got[1] == ref[1],
                       f"{where}: the new growth tracker is wrong", ref[1], got[1])
