"""What this PyTorch does when an fp32 value is cast to fp8 e4m3fn beyond its range (448).

e4m3fn has no infinity, so an overflowing cast must give NaN or the largest finite value; the OCP
8-bit floating point specification (OFP8, rev. 1.0) allows both, a non-saturating and a saturating
mode. PyTorch changed its answer:

- before the change, its cast returned NaN for every magnitude that rounds past 448 (above 464,
  the tie between 448 and 480, which rounds to the even 448) and for +-inf. torch 2.11 does that:
  the H200 reference notebooks were recorded with it and print NaN;
- pytorch/pytorch#178817 ("Properly saturate E4M3 on finite-overflow on CPU/C++ conversion code",
  merged in April 2026) made the cast saturate to +-448, +-inf included; NaN stays NaN. torch 2.13
  does that (this course's CPU test machine runs it).

The change landed on the main branch around the 2.12 release branch cut, so this module does not
say what 2.12 does: `overflow_mode()` asks the torch that is running, which is the only answer a
notebook should trust. The exercise 01.fp8_round and its checks work with either behaviour.
"""
from __future__ import annotations

import math

import torch

__all__ = ["SATURATE", "NAN", "CHANGE", "overflow_mode", "saturates", "torch_e4m3",
           "saturating_e4m3", "non_saturating_e4m3"]

SATURATE, NAN = "saturate", "nan"
CHANGE = ("pytorch/pytorch#178817", "April 2026")   # the pull request that made the cast saturate
PROBE = 1e4            # far beyond 448: rounds past the max in any version


def _cast(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.float32).to(torch.float8_e4m3fn).to(torch.float32)


def torch_e4m3(x: torch.Tensor) -> torch.Tensor:
    """torch's own fp32 -> float8_e4m3fn -> fp32 round trip (the oracle of exercise 01.fp8_round)."""
    return _cast(x)


def overflow_mode() -> str:
    """SATURATE if this torch casts 10000 to 448, NAN if it gives NaN; anything else is an error."""
    got = torch_e4m3(torch.tensor([PROBE])).item()
    if got == 448.0:
        return SATURATE
    if math.isnan(got):
        return NAN
    raise RuntimeError(f"casting {PROBE:g} to float8_e4m3fn gave {got!r}; expected 448.0 (saturating) "
                       "or NaN (non-saturating)")


def saturates() -> bool:
    """True where this torch saturates an overflowing e4m3fn cast to +-448."""
    return overflow_mode() == SATURATE


# Both behaviours, built from the running torch's cast (which agrees with both up to 464), so that
# tests can check the exercise and its checks against each one on a single torch.
def saturating_e4m3(x: torch.Tensor) -> torch.Tensor:
    """The cast since the change: +-448 wherever the rounded magnitude passes 448 (|x| > 464, inf too)."""
    x = x.to(torch.float32)
    over = x.abs() > 464.0                          # False for NaN, which stays NaN
    return torch.where(over, torch.copysign(torch.full_like(x, 448.0), x), _cast(x))


def non_saturating_e4m3(x: torch.Tensor) -> torch.Tensor:
    """The cast before the change: NaN wherever the rounded magnitude passes 448, and at +-inf."""
    x = x.to(torch.float32)
    return torch.where(x.abs() > 464.0, torch.full_like(x, math.nan), _cast(x))
