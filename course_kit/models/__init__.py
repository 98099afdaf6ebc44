"""The course's models, built from config with seeded weights or loaded from HF weights.

    llama      a compact Llama (RMSNorm, RoPE, GQA, SwiGLU): prefill, decode and paged passes;
               `set_attention` plugs in kernels from course_kit.attention (notebooks 05-10)
    kv_cache   StaticKVCache (contiguous, CUDA graphs) and PagedKVCache (blocks, the engine)
    sampling   greedy, temperature, top-k, top-p by Gumbel-max: no host sync, graph-safe
    hf         weights to and from transformers' LlamaForCausalLM, the oracle (offline)
    tiny_gpt   a small GPT-style decoder for notebooks 02 (AMP) and 03 (torch.compile)
"""
from . import llama, sampling  # noqa: F401
