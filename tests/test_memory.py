"""course_kit.dtypes.memory against the ZeRO paper's bytes per parameter, the lecture's 7B figures,
HF transformers' own parameter counts and the Korthikanti et al. activation formula."""
from __future__ import annotations

import math

import pytest
import torch

from course_kit.dtypes import memory as m


def test_zero_paper_16_bytes_per_parameter():
    # ZeRO section 3.1: fp16 weights (2) + fp16 grads (2) + fp32 master, momentum, variance (12)
    parts = m.training_bytes(1, "adam", mixed=True, low_dtype="fp16")
    assert parts == {"weights": 2, "gradients": 2, "optimizer moments": 8, "master weights": 4}
    assert sum(parts.values()) == 16
    # "K = 12" bytes of optimizer state per parameter
    assert parts["optimizer moments"] + parts["master weights"] == 12
    # Psi = 7.5B parameters -> 120 GB (ZeRO figure 1, baseline)
    assert sum(m.training_bytes(7.5e9).values()) == pytest.approx(120e9)
    assert sum(m.training_bytes(1, "adam", mixed=False).values()) == 16
    assert sum(m.training_bytes(1, "sgd", mixed=False).values()) == 8
    assert sum(m.training_bytes(1, "sgd_momentum", mixed=True).values()) == 12


def test_lecture_7b_figures():
    n = 7e9
    got = {d: m.weights_bytes(n, d) / m.GB for d in ("fp32", "bf16", "int8", "int4")}
    assert got == {"fp32": 28.0, "bf16": 14.0, "int8": 7.0, "int4": 3.5}
    assert sum(m.training_bytes(n).values()) / m.GB == 112.0


def test_presets_match_hf_transformers_parameter_counts():
    from transformers import LlamaConfig, LlamaForCausalLM
    for key, s in m.PRESETS.items():
        cfg = LlamaConfig(hidden_size=s.hidden, intermediate_size=s.intermediate,
                          num_hidden_layers=s.layers, num_attention_heads=s.heads,
                          num_key_value_heads=s.kv_heads, vocab_size=s.vocab,
                          tie_word_embeddings=s.tied_embeddings)
        with torch.device("meta"):
            model = LlamaForCausalLM(cfg)
        hf = sum(p.numel() for p in model.parameters())
        assert s.n_params() == hf, key
    assert m.PRESETS["7b"].n_params() == 6_738_415_616          # Llama-2-7B
    assert m.PRESETS["70b"].n_params() == 68_976_648_192        # Llama-2-70B


def test_kv_cache_bytes():
    s = m.PRESETS["70b"]
    # 2 * 80 layers * 8 KV heads * 128 dims * 2 bytes = 327,680 bytes per token
    assert m.kv_cache_bytes(s.layers, s.kv_heads, s.head_dim, 1, 1) == 327_680
    assert m.kv_cache_bytes(s.layers, s.kv_heads, s.head_dim, 4096, 8, "fp8") == \
        327_680 // 2 * 4096 * 8


def test_activation_bytes_formula():
    # Korthikanti et al. 2022 eq. (1)-(4): per layer s*b*h*(34 + 5 a s / h)
    L, h, a, s, b = 2, 1024, 16, 512, 4
    assert m.activation_bytes(L, h, a, s, b) == L * s * b * h * (34 + 5 * a * s / h)
    assert m.activation_bytes(L, h, a, s, b, flash=True) == L * s * b * h * 34
    t = 4
    assert m.activation_bytes(L, h, a, s, b, tp=t) == \
        pytest.approx(L * s * b * h * (10 + 24 / t + 5 * a * s / (h * t)))
    assert m.activation_bytes(L, h, a, s, b, tp=t, sequence_parallel=True) == \
        pytest.approx(L * s * b * h / t * (34 + 5 * a * s / h))
    full = m.activation_bytes(L, h, a, s, b)
    ckpt = m.activation_bytes(L, h, a, s, b, checkpointing=True)
    assert ckpt == L * 2 * s * b * h + full / L and ckpt < full


def test_per_gpu_70b_at_tp_1_2_4_8():
    weights = {t: m.per_gpu_bytes("70b", t)["weights"] for t in (1, 2, 4, 8)}
    assert weights[1] == 2 * 68_976_648_192
    for t in (2, 4, 8):
        assert weights[t] == pytest.approx(weights[1] / t)
    kv = {t: m.per_gpu_bytes("70b", t, seq=4096, batch=1)["KV cache"] for t in (1, 8, 16)
          if 64 % t == 0}
    assert kv[8] == kv[1] / 8
    # beyond 8 KV heads a GPU keeps a whole head: replication, not further savings
    assert kv[16] == kv[8]
    train = m.per_gpu_bytes("70b", 8, training=True)
    assert sum(train.values()) == pytest.approx(16 * 68_976_648_192 / 8)


def test_bad_input_names_value_and_choices():
    with pytest.raises(ValueError, match="n_params must be .* got -1"):
        m.weights_bytes(-1)
    with pytest.raises(ValueError, match="n_params .* got nan"):
        m.training_bytes(math.nan)
    with pytest.raises(ValueError, match="unknown dtype 'fp12'.*fp32"):
        m.weights_bytes(1, "fp12")
    with pytest.raises(ValueError, match="unknown optimizer 'lion'.*adam"):
        m.training_bytes(1, "lion")
    with pytest.raises(ValueError, match="tp must be an integer >= 1, got 0"):
        m.per_gpu_bytes("7b", 0)
    with pytest.raises(ValueError, match="tp=3 must divide"):
        m.per_gpu_bytes("7b", 3)
    with pytest.raises(ValueError, match="unknown model '13b'.*70b"):
        m.per_gpu_bytes("13b")
