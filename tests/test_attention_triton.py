"""The Triton flash-attention kernel against a float64 reference (interpreter on CPU, real on GPU)."""
import pytest
import torch

pytest.importorskip("triton")

from course_kit.attention import reference_attention  # noqa: E402  (sets TRITON_INTERPRET first)
from course_kit.attention.naive import reference_lse  # noqa: E402
from course_kit.attention import triton_flash  # noqa: E402
from course_kit.attention.triton_flash import flash_attention  # noqa: E402

# bf16 keeps 8 significant bits: inputs, P and the output are each rounded once (outputs are O(1))
TOL = {torch.bfloat16: 3e-2, torch.float16: 5e-3}


def _random_case(seed, device, max_len, dims):
    g = torch.Generator().manual_seed(seed)
    r = lambda lo, hi: int(torch.randint(lo, hi + 1, (1,), generator=g))  # noqa: E731
    hkv = r(1, 2)
    hq = hkv * r(1, 3)
    sq = r(1, max_len)
    sk = sq if r(0, 1) else r(1, max_len)
    d = dims[r(0, len(dims) - 1)]
    dtype = (torch.bfloat16, torch.float16)[r(0, 1)]
    causal = bool(r(0, 1)) or seed == 0
    shape_q, shape_kv = (r(1, 2), hq, sq, d), (None, hkv, sk, d)
    q = torch.randn(shape_q, generator=g, dtype=torch.float64)
    k = torch.randn((shape_q[0],) + shape_kv[1:], generator=g, dtype=torch.float64)
    v = torch.randn((shape_q[0],) + shape_kv[1:], generator=g, dtype=torch.float64)
    return [t.to(dtype).to(device) for t in (q, k, v)], causal, dtype


def _check_against_float64(q, k, v, causal, dtype, **kw):
    out, lse = flash_attention(q, k, v, causal=causal, return_lse=True, **kw)
    ref = reference_attention(q, k, v, causal=causal)
    assert out.dtype == dtype and out.shape == q.shape
    err = (out.double().cpu() - ref).abs().max().item()
    assert err <= TOL[dtype], f"max |out - float64 ref| = {err:.3g} > {TOL[dtype]} for {tuple(q.shape)} {tuple(k.shape)} causal={causal}"
    # the log-sum-exp the kernel stores for a backward pass, against float64
    torch.testing.assert_close(lse.double().cpu(), reference_lse(q, k, causal=causal), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("seed", range(5))
def test_interpreter_random_shapes(seed):
    if torch.cuda.is_available():
        pytest.skip("covered by the gpu test on a CUDA machine")
    # lengths up to 80 with 32-wide blocks: ragged tails, several blocks, and Sq != Sk
    (q, k, v), causal, dtype = _random_case(seed, "cpu", 80, (16, 32, 64))
    _check_against_float64(q, k, v, causal, dtype)


@pytest.mark.parametrize("loader", ["pointer", "descriptor"])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_interpreter_both_loaders_head_dims_gqa_causal(loader, head_dim):
    if torch.cuda.is_available():
        pytest.skip("covered by the gpu test on a CUDA machine")
    if loader == "descriptor" and not triton_flash.HAS_DESCRIPTORS:
        pytest.skip("this triton has no tensor descriptors")
    g = torch.Generator().manual_seed(head_dim)
    q = torch.randn(1, 4, 45, head_dim, generator=g).bfloat16()
    k = torch.randn(1, 2, 45, head_dim, generator=g).bfloat16()
    v = torch.randn(1, 2, 45, head_dim, generator=g).bfloat16()
    _check_against_float64(q, k, v, True, torch.bfloat16, loader=loader, block_m=32, block_n=16)


def _every_loader_on_a_strided_layout(desc, device, rows, head_dim):
    """Each way of loading tiles, on q/k/v that are [B, S, H, D] tensors seen as [B, H, S, D]
    (what a model's projections give): the host's 4-D descriptor must follow those strides."""
    if desc == triton_flash.HOST_DESC and triton_flash.TensorDescriptor is None:
        pytest.skip("this triton has no host tensor descriptors")
    if desc != triton_flash.POINTER and not triton_flash.descriptor_usable(
            *(torch.empty(1, 1, 16, 64, device=device, dtype=torch.bfloat16),) * 3)[0]:
        pytest.skip("no TMA descriptors here")
    g = torch.Generator().manual_seed(desc)
    q, k, v = (torch.randn(2, rows, h, head_dim, generator=g).bfloat16().to(device).transpose(1, 2)
               for h in (4, 2, 2))
    for causal in (True, False):
        out, lse = triton_flash.launch_forward(q, k, v, causal=causal, scale=None, desc=desc)
        ref = reference_attention(q, k, v, causal=causal)
        assert (out.double().cpu() - ref).abs().max().item() <= TOL[torch.bfloat16]


@pytest.mark.parametrize("desc", [triton_flash.POINTER, triton_flash.DEVICE_DESC, triton_flash.HOST_DESC])
def test_interpreter_every_loader_kind_on_a_strided_layout(desc):
    if torch.cuda.is_available():
        pytest.skip("covered by the gpu test on a CUDA machine")
    # 100 rows: whole 32-wide key blocks before the diagonal (the unmasked loop) and a ragged tail
    _every_loader_on_a_strided_layout(desc, "cpu", 100, 32)


@pytest.mark.gpu
@pytest.mark.parametrize("desc", [triton_flash.POINTER, triton_flash.DEVICE_DESC, triton_flash.HOST_DESC])
def test_gpu_every_loader_kind_on_a_strided_layout(desc):
    _every_loader_on_a_strided_layout(desc, "cuda", 1000, 128)


def test_errors_name_the_bad_value():
    q = torch.randn(1, 2, 8, 48).half()
    with pytest.raises(ValueError, match="head dim must be one of"):
        flash_attention(q, q, q)
    q = torch.randn(1, 2, 8, 32)
    with pytest.raises(ValueError, match="dtype must be one of"):
        flash_attention(q, q, q)
    with pytest.raises(ValueError, match="scale must be > 0"):
        flash_attention(q.half(), q.half(), q.half(), scale=-1.0)
    with pytest.raises(ValueError, match="loader must be one of"):
        flash_attention(q.half(), q.half(), q.half(), loader="tma")
    with pytest.raises(ValueError, match="multiple of key/value heads"):
        flash_attention(torch.randn(1, 3, 8, 32).half(), q[:, :2].half(), q[:, :2].half())


@pytest.mark.gpu
@pytest.mark.parametrize("seed", range(12))
def test_gpu_random_shapes_against_float64(seed):
    # lengths up to 700 cover ragged tails for every autotuned block size (64 and 128)
    (q, k, v), causal, dtype = _random_case(seed, "cuda", 700, (64, 128))
    _check_against_float64(q, k, v, causal, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("loader", ["pointer", "descriptor"])
@pytest.mark.parametrize("causal", [False, True])
def test_gpu_loaders_against_sdpa(loader, causal):
    q, k, v = (torch.randn(2, 8, 1000, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    k, v = k[:, :2].contiguous(), v[:, :2].contiguous()    # GQA 8 query heads on 2 K/V heads
    usable, why = triton_flash.descriptor_usable(q, k, v)
    if loader == "descriptor" and not usable:
        pytest.skip(why)
    _check_against_float64(q, k, v, causal, torch.bfloat16, loader=loader)
    sdpa = torch.nn.functional.scaled_dot_product_attention(q, k.repeat_interleave(4, 1), v.repeat_interleave(4, 1),
                                                            is_causal=causal)
    out = flash_attention(q, k, v, causal=causal, loader=loader)
    torch.testing.assert_close(out, sdpa, rtol=2e-2, atol=2e-2)


def _grads(fn, q, k, v, do):
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    fn(q, k, v).backward(do)
    return [t.grad for t in (q, k, v)]


def _check_backward(b, hq, hkv, sq, sk, d, causal, dtype, device, seed):
    from course_kit.attention.naive import naive_attention
    from course_kit.attention.triton_flash_bwd import flash_attention_trainable
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, h, s, d, generator=g).to(device, dtype) for h, s in ((hq, sq), (hkv, sk), (hkv, sk)))
    do = torch.randn(b, hq, sq, d, generator=g).to(device, dtype)
    ref = _grads(lambda q, k, v: naive_attention(q, k, v, causal=causal), q.double(), k.double(), v.double(), do.double())
    ours = _grads(lambda q, k, v: flash_attention_trainable(q, k, v, causal=causal), q, k, v, do)
    group = hq // hkv
    sdpa = _grads(lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1), is_causal=causal), q, k, v, do)
    for name, r, o, s in zip("qkv", ref, ours, sdpa):
        r = r.cpu()
        rel = lambda x: ((x.double().cpu() - r).abs().max() / r.abs().max()).item()  # noqa: E731
        assert o.shape == r.shape and o.dtype == dtype
        # gradients as close to float64 as SDPA's own are (bf16 rounds inputs, P and dS)
        assert rel(o) <= 3 * rel(s) + 5e-3 and rel(o) <= 3e-2, f"d{name}: ours {rel(o):.3g}, SDPA {rel(s):.3g}"


@pytest.mark.parametrize("case", [(1, 4, 2, 45, 45, 32, True, torch.bfloat16),
                                  (1, 2, 2, 37, 70, 64, False, torch.float16)])
def test_interpreter_backward_matches_float64_like_sdpa(case):
    if torch.cuda.is_available():
        pytest.skip("covered by the gpu test on a CUDA machine")
    _check_backward(*case, device="cpu", seed=sum(case[:6]))


@pytest.mark.parametrize("seed", range(6))
def test_interpreter_backward_random_shapes(seed):
    """Ragged and whole-block lengths, Sq above and below Sk, GQA: every phase of the backward's
    loops (diagonal, whole blocks, ragged tail) is reached with the interpreter's 16/32 blocks."""
    if torch.cuda.is_available():
        pytest.skip("covered by the gpu test on a CUDA machine")
    g = torch.Generator().manual_seed(100 + seed)
    r = lambda lo, hi: int(torch.randint(lo, hi + 1, (1,), generator=g))  # noqa: E731
    hkv = r(1, 2)
    sq = (32, 64, r(1, 90))[seed % 3]
    sk = sq if seed % 2 else r(1, 90)
    _check_backward(r(1, 2), hkv * r(1, 2), hkv, sq, sk, (16, 32, 64)[seed % 3], bool(seed % 4),
                    (torch.bfloat16, torch.float16)[seed % 2], device="cpu", seed=seed)


@pytest.mark.gpu
@pytest.mark.parametrize("case", [(2, 8, 2, 1000, 1000, 128, True, torch.bfloat16),
                                  (1, 4, 4, 333, 333, 64, False, torch.bfloat16),
                                  (1, 4, 1, 517, 517, 128, True, torch.float16)])
def test_gpu_backward_matches_float64_like_sdpa(case):
    _check_backward(*case, device="cuda", seed=sum(case[:6]))
