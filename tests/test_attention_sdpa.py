"""SDPA backend rules on simulated GPUs, and the backends that really run here against float64."""
import pytest
import torch

from course_kit.attention import reference_attention
from course_kit.attention import sdpa_backends as sb


def test_t4_has_no_flash_no_cudnn_and_no_bf16_efficient():
    t4 = sb.backend_support((7, 5), torch.bfloat16, 64)
    assert not t4["flash"][0] and "sm_80" in t4["flash"][1]
    assert not t4["cudnn"][0]
    assert not t4["efficient"][0] and "fp16" in t4["efficient"][1]
    assert sb.backend_support((7, 5), torch.float16, 64)["efficient"][0]
    assert t4["math"][0]


@pytest.mark.parametrize("cap", [(8, 0), (8, 6), (8, 9), (9, 0)])
def test_ampere_and_hopper_have_every_backend_in_half_precision(cap):
    for dtype in (torch.float16, torch.bfloat16):
        assert all(ok for ok, _ in sb.backend_support(cap, dtype, 128).values())


def test_dtype_and_head_dim_rules():
    h100 = sb.backend_support((9, 0), torch.float32, 128)
    assert not h100["flash"][0] and not h100["cudnn"][0] and h100["efficient"][0]
    assert not sb.backend_support((9, 0), torch.bfloat16, 256)["cudnn"][0]
    assert sb.backend_support((9, 0), torch.bfloat16, 256)["flash"][0]
    assert not sb.backend_support((9, 0), torch.bfloat16, 100)["flash"][0]
    # cuDNN attention arrived in torch 2.5
    assert not sb.backend_support((9, 0), torch.bfloat16, 128, torch_version="2.4.1")["cudnn"][0]
    with pytest.raises(ValueError, match="dtype must be"):
        sb.backend_support((9, 0), torch.int8)
    with pytest.raises(ValueError, match="backend must be one of"):
        sb.sdpa(torch.zeros(1, 1, 2, 8), torch.zeros(1, 1, 2, 8), torch.zeros(1, 1, 2, 8), backend="xformers")


def test_cpu_rules_match_what_pytorch_really_runs_here():
    if torch.cuda.is_available():
        pytest.skip("CPU rules")
    q = torch.randn(1, 2, 33, 16)
    real = sb.probe(q, q, q, causal=True)
    predicted = sb.backend_support(None, torch.float32, 16)
    assert {k: ok for k, (ok, _) in real.items()} == {k: ok for k, (ok, _) in predicted.items()}


@pytest.mark.parametrize("causal", [False, True])
def test_every_runnable_backend_matches_float64(causal):
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if dev == "cuda" else torch.float32
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 4, 70, 64, generator=g).to(dev, dtype)
    k = torch.randn(2, 2, 70, 64, generator=g).to(dev, dtype)
    v = torch.randn(2, 2, 70, 64, generator=g).to(dev, dtype)
    ref = reference_attention(q, k, v, causal=causal)
    ran = [name for name, (ok, _) in sb.probe(q, k, v, causal).items() if ok]
    assert "math" in ran
    tol = 3e-2 if dtype == torch.bfloat16 else 1e-5
    for name in ran:
        out = sb.sdpa(q, k, v, backend=name, causal=causal)
        torch.testing.assert_close(out.double().cpu(), ref, rtol=tol, atol=tol, msg=lambda m: f"{name}: {m}")


def test_support_table_rows():
    rows = sb.support_table({"T4": (7, 5), "H200": (9, 0), "CPU": None})
    assert len(rows) == 12 and {r["backend"] for r in rows} == set(sb.BACKENDS)


def test_xformers_only_when_installed():
    if sb.xformers_available():
        pytest.skip("xformers is installed here")
    with pytest.raises(ValueError, match="xformers is not installed"):
        sb.xformers_attention(torch.zeros(1, 1, 2, 8), torch.zeros(1, 1, 2, 8), torch.zeros(1, 1, 2, 8))


@pytest.mark.gpu
def test_gpu_rules_match_what_pytorch_really_runs():
    cap = torch.cuda.get_device_capability()
    q = torch.randn(1, 4, 256, 128, device="cuda", dtype=torch.bfloat16 if cap >= (8, 0) else torch.float16)
    real = sb.probe(q, q, q, causal=True)
    predicted = sb.backend_support(cap, q.dtype, 128)
    for name in sb.BACKENDS:
        assert real[name][0] == predicted[name][0], f"{name}: ran={real[name]}, rule={predicted[name]}"
