"""Notebook 02's claims about autocast, checked against PyTorch itself (issue 41 item 14)."""
from __future__ import annotations

import torch


def _weight_grad(autocast: bool) -> torch.Tensor:
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 3, bias=False)
    x = torch.full((1, 4), 1e-3)
    with torch.autocast("cpu", dtype=torch.float16, enabled=autocast):
        y = lin(x)
    (y.float() * 1e-5).sum().backward()          # dL/dy = 1e-5: dW = 1e-5 * 1e-3 = 1e-8 per entry
    return lin.weight.grad


def test_the_weights_gradient_under_fp16_autocast_is_computed_in_fp16_then_cast():
    """02:109: the weight's gradient comes out of an fp16 matmul and is cast to fp32 afterwards, so
    a value below fp16's smallest subnormal (2^-24, about 6e-8) is zero although the weight is fp32."""
    full = _weight_grad(autocast=False)
    half = _weight_grad(autocast=True)
    assert full.dtype == half.dtype == torch.float32             # stored in fp32 either way
    assert torch.allclose(full, torch.full_like(full, 1e-8)) and bool((full != 0).all())
    assert bool((half == 0).all())                               # ... but it underflowed in fp16
