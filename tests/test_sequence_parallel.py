"""Sequence parallelism run on gloo: equal to the unsharded block, and every saved activation / t."""
import pytest

from course_kit.parallel import launcher, sp_run


def test_tp_and_sp_blocks_equal_the_unsharded_block_and_sp_divides_saved_bytes():
    for r in launcher.launch(sp_run.check_sp, 2, seq=32, hidden=16, backend="gloo"):
        for k in ("out", "dx", "dw1", "dnorm"):
            assert r[f"tp_{k}"] < 1e-5 and r[f"tp_sp_{k}"] < 1e-5, k
        one, tp, sp = r["saved_bytes_one_process"], r["tp_saved_bytes"], r["tp_sp_saved_bytes"]
        # TP splits only the GeLU's input and output (s x 4h each); LayerNorm and the first
        # linear's input stay whole; with SP everything a rank saves is 1/t of one process's
        assert sp * 2 == one
        assert tp == one - 2 * (32 * 4 * 16 * 4) // 2
        assert one > tp > sp


def test_sp_needs_a_divisible_sequence():
    with pytest.raises(Exception, match="divisible"):
        launcher.launch(sp_run.check_sp, 2, seq=33, backend="gloo")


# ---- a Llama layer's stored activations, derived (parallel/sequence.py) and counted (issue 41 item 15) ----

def _llama_block_saved_bytes(dim, heads, kv_heads, ffn, seq, batch):
    """Bytes autograd saves for the backward of one course Llama block (bf16, SDPA's flash kernel),
    each storage counted once; the weights and the RoPE tables (shared by every layer) left out."""
    import math
    from functools import partial

    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from course_kit.models import llama
    cfg = llama.ModelConfig(vocab_size=64, dim=dim, n_layers=1, n_heads=heads, n_kv_heads=kv_heads,
                            ffn_dim=ffn, max_seq_len=seq)
    torch.manual_seed(0)
    block = llama.Block(cfg).to(torch.bfloat16)
    x = torch.randn(batch, seq, dim, dtype=torch.bfloat16, requires_grad=True)
    angles = torch.arange(seq).float()[None, :, None] * llama.rope_inv_freq(cfg)
    cos, sin = angles.cos()[..., None, :].to(x.dtype), angles.sin()[..., None, :].to(x.dtype)
    skip = {t.untyped_storage().data_ptr() for t in (*block.parameters(), cos, sin)}
    saved = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in skip:
            saved[st.data_ptr()] = st.nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        block(x, cos, sin, partial(llama._causal, scale=1 / math.sqrt(cfg.head_dim)))
    return sum(saved.values())


@pytest.mark.parametrize("dim, heads, kv_heads, ffn", [(256, 8, 2, 896), (128, 4, 4, 448), (256, 8, 1, 640)])
def test_the_llama_count_matches_what_autograd_saves_for_the_course_block(dim, heads, kv_heads, ffn):
    from course_kit.parallel import sequence
    seq, batch = 64, 2
    derived = sequence.layer_activation_bytes(seq, batch, dim, heads, flash=True, kv_heads=kv_heads, ffn=ffn)
    # the course's eager block keeps more than the accounting, and exactly what EAGER_EXTRAS names:
    # per RMSNorm an fp32 copy of its input and the normalised values (+4h a token, two norms), and
    # K and V repeated to every query head (+4(1 - kv/a)h) or, without GQA, the fused q/k/v buffer
    g = kv_heads / heads
    extras = seq * batch * (2 * 4 * dim + (4 * (1 - g) * dim if kv_heads < heads else 2 * dim + 2 * g * dim))
    assert sequence.eager_extra_bytes(dim, heads, kv_heads) * seq * batch == extras
    assert _llama_block_saved_bytes(dim, heads, kv_heads, ffn, seq, batch) == derived + extras


def test_llama_parts_against_the_derivation_and_the_paper():
    from course_kit.parallel import sequence
    s, b, h, a = 4096, 1, 8192, 64
    sbh = s * b * h
    # the paper's GPT layer: 34 sbh + 5 a s^2 b
    assert sequence.layer_activation_bytes(s, b, h, a) == sbh * 34 + 5 * a * s * s * b
    # Llama-2-70B: 12h + 4(kv/a)h + 8f a token, + two fp32 1/rms, + the flash log-sum-exp (4a)
    llama = sequence.layer_activation_bytes(s, b, h, a, flash=True, kv_heads=8, ffn=28672)
    assert llama == s * b * (12 * h + 4 * 8 / 64 * h + 8 * 28672 + 8 + 4 * a)
    assert llama / sbh == pytest.approx(40.5, abs=0.05)
    # without flash attention: the softmax output only (no dropout), 2 a s^2 b
    no_flash = sequence.layer_activation_bytes(s, b, h, a, kv_heads=8, ffn=28672)
    assert no_flash - llama == 2 * a * s * s * b - 4 * a * s * b
    # TP: the RMSNorm and linear inputs (8h) and the 1/rms stay whole, the rest is split; with
    # sequence parallelism everything is divided by t; with t > kv heads K and V keep a whole head
    t = 8
    tp = sequence.layer_activation_bytes(s, b, h, a, t, flash=True, kv_heads=8, ffn=28672)
    assert tp == s * b * (8 * h + 8 + (4 * h + 4 * 8 / 64 * h + 8 * 28672 + 4 * a) / t)
    sp = sequence.layer_activation_bytes(s, b, h, a, t, True, flash=True, kv_heads=8, ffn=28672)
    assert sp == pytest.approx(llama / t)
    rep = sequence.layer_activation_bytes(s, b, h, a, 16, flash=True, kv_heads=8, ffn=28672)
    assert rep == s * b * (8 * h + 8 + (4 * h + 8 * 28672 + 4 * a) / 16 + 2 * 2 * h / a)
    with pytest.raises(ValueError, match="both kv_heads and ffn"):
        sequence.layer_activation_bytes(s, b, h, a, kv_heads=8)
