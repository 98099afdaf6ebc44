"""Moving weights between the course model and transformers' LlamaForCausalLM (the oracle).

Works offline: `model_from_pretrained` reads a local folder written by `save_pretrained`
(config.json plus one or several safetensors files) and never touches the network.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from .llama import SUPPORTED_DTYPES, ModelConfig, Transformer, _check_dtype


def _rope_params(hf_config) -> tuple[float, dict | None]:
    """(theta, llama3 scaling or None) from either the v5 `rope_parameters` or the older fields."""
    params = dict(getattr(hf_config, "rope_parameters", None) or {})
    legacy = getattr(hf_config, "rope_scaling", None) or {}
    params = {**legacy, **params}
    theta = params.get("rope_theta", getattr(hf_config, "rope_theta", 10000.0))
    kind = params.get("rope_type", params.get("type", "default"))
    if kind == "default":
        return float(theta), None
    if kind != "llama3":
        raise ValueError(f"unsupported rope_type {kind!r}; choices: ['default', 'llama3']")
    keys = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
    return float(theta), {k: params[k] for k in keys}


def config_from_hf(hf_config) -> ModelConfig:
    if isinstance(hf_config, dict):
        from transformers import LlamaConfig
        hf_config = LlamaConfig.from_dict(hf_config)
    for flag in ("attention_bias", "mlp_bias"):
        if getattr(hf_config, flag, False):
            raise ValueError(f"{flag}=True is not supported by the course model (expected False)")
    act = getattr(hf_config, "hidden_act", "silu")
    if act != "silu":
        raise ValueError(f"hidden_act {act!r} is not supported; choices: ['silu']")
    theta, scaling = _rope_params(hf_config)
    n_heads = hf_config.num_attention_heads
    return ModelConfig(
        vocab_size=hf_config.vocab_size, dim=hf_config.hidden_size, n_layers=hf_config.num_hidden_layers,
        n_heads=n_heads, n_kv_heads=hf_config.num_key_value_heads or n_heads,
        ffn_dim=hf_config.intermediate_size,
        head_dim=getattr(hf_config, "head_dim", None) or hf_config.hidden_size // n_heads,
        norm_eps=hf_config.rms_norm_eps, rope_theta=theta, rope_scaling=scaling,
        max_seq_len=hf_config.max_position_embeddings,
        tie_embeddings=bool(getattr(hf_config, "tie_word_embeddings", False)), name="hf")


def config_to_hf(cfg: ModelConfig):
    from transformers import LlamaConfig
    rope = {"rope_type": "default", "rope_theta": cfg.rope_theta}
    if cfg.rope_scaling:
        rope = {"rope_type": "llama3", "rope_theta": cfg.rope_theta, **cfg.rope_scaling}
    return LlamaConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.dim, intermediate_size=cfg.ffn_dim,
        num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.n_heads,
        num_key_value_heads=cfg.n_kv_heads, head_dim=cfg.head_dim, rms_norm_eps=cfg.norm_eps,
        max_position_embeddings=cfg.max_seq_len, tie_word_embeddings=cfg.tie_embeddings,
        rope_parameters=rope, bos_token_id=None, eos_token_id=None, pad_token_id=None)


def state_dict_from_hf(sd: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """HF names -> course names, fusing q/k/v into wqkv and gate/up into w13."""
    def get(name):
        for key in (name, f"model.{name}"):
            if key in sd:
                return sd[key]
        raise KeyError(f"checkpoint has no weight {name!r}")
    out = {"tok_embeddings.weight": get("embed_tokens.weight"), "norm.weight": get("norm.weight")}
    for i in range(cfg.n_layers):
        p, q = f"layers.{i}.", f"layers.{i}."
        out[q + "attention.wqkv.weight"] = torch.cat(
            [get(p + f"self_attn.{n}_proj.weight") for n in "qkv"], 0)
        out[q + "attention.wo.weight"] = get(p + "self_attn.o_proj.weight")
        out[q + "feed_forward.w13.weight"] = torch.cat(
            [get(p + "mlp.gate_proj.weight"), get(p + "mlp.up_proj.weight")], 0)
        out[q + "feed_forward.w2.weight"] = get(p + "mlp.down_proj.weight")
        out[q + "attention_norm.weight"] = get(p + "input_layernorm.weight")
        out[q + "ffn_norm.weight"] = get(p + "post_attention_layernorm.weight")
    if not cfg.tie_embeddings:
        out["output.weight"] = sd["lm_head.weight"]
    return out


def state_dict_to_hf(model: Transformer) -> dict[str, torch.Tensor]:
    cfg, sd = model.config, model.state_dict()
    q_size, kv_size = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    out = {"model.embed_tokens.weight": sd["tok_embeddings.weight"], "model.norm.weight": sd["norm.weight"]}
    for i in range(cfg.n_layers):
        p, q = f"model.layers.{i}.", f"layers.{i}."
        wq, wk, wv = sd[q + "attention.wqkv.weight"].split([q_size, kv_size, kv_size], 0)
        gate, up = sd[q + "feed_forward.w13.weight"].split(cfg.ffn_dim, 0)
        out.update({p + "self_attn.q_proj.weight": wq, p + "self_attn.k_proj.weight": wk,
                    p + "self_attn.v_proj.weight": wv, p + "self_attn.o_proj.weight": sd[q + "attention.wo.weight"],
                    p + "mlp.gate_proj.weight": gate, p + "mlp.up_proj.weight": up,
                    p + "mlp.down_proj.weight": sd[q + "feed_forward.w2.weight"],
                    p + "input_layernorm.weight": sd[q + "attention_norm.weight"],
                    p + "post_attention_layernorm.weight": sd[q + "ffn_norm.weight"]})
    out["lm_head.weight"] = sd["tok_embeddings.weight"] if cfg.tie_embeddings else sd["output.weight"]
    return out


def _load(cfg: ModelConfig, sd: dict, dtype: torch.dtype, device) -> Transformer:
    _check_dtype(dtype)
    with torch.device(device):
        model = Transformer(cfg).to(dtype)
    model.load_state_dict(state_dict_from_hf(sd, cfg), strict=True)
    return model.eval()


def model_from_hf(hf_model, dtype: torch.dtype | None = None, device=None) -> Transformer:
    """Copy the weights of a LlamaForCausalLM (keeps its dtype and device unless told)."""
    cfg = config_from_hf(hf_model.config)
    first = next(hf_model.parameters())
    return _load(cfg, hf_model.state_dict(), dtype or first.dtype, device or first.device)


def model_to_hf(model: Transformer):
    from transformers import LlamaForCausalLM
    first = model.tok_embeddings.weight
    with torch.device(first.device):
        hf = LlamaForCausalLM(config_to_hf(model.config)).to(first.dtype)
    hf.load_state_dict(state_dict_to_hf(model), strict=True)
    return hf.eval()


def model_from_pretrained(path, dtype: torch.dtype | None = None, device="cpu") -> Transformer:
    """Load a local save_pretrained folder (config.json + *.safetensors), with no network."""
    from safetensors.torch import load_file
    folder = Path(path)
    if not (folder / "config.json").is_file():
        raise ValueError(f"{folder} has no config.json; expected a folder written by save_pretrained")
    config = json.loads((folder / "config.json").read_text())
    cfg = config_from_hf(config)
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ValueError(f"{folder} has no *.safetensors files")
    sd: dict[str, torch.Tensor] = {}
    for f in files:
        sd.update(load_file(str(f)))
    if dtype is None:
        dtype = getattr(torch, str(config.get("dtype") or config.get("torch_dtype") or "float32"))
        dtype = dtype if dtype in SUPPORTED_DTYPES else torch.float32
    return _load(cfg, sd, dtype, device)
