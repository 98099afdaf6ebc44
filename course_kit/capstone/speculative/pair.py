"""The course's own target and draft models: their shapes, where they are kept, how they are loaded
and scored.

The shapes are chosen for speculative decoding at batch 1 on a GPU, where a decode step costs about
its kernel launches, so a model's cost per token is about its number of layers (plus the embedding,
the logits and the argmax). The target is deep and narrow (16 layers of width 192); the draft is one
layer of the same width, about a ninth of the target's parameters, so its step costs about a tenth
of the target's. Both share one byte-level BPE of 2,048 tokens, trained on the same corpus
(`corpus.py`), and the same head size (64), so one set of kernels serves both. The draft is
finally distilled from the target (`train_pair.py`): agreeing with the target is its job.

Files under `data/models/` (or $COURSE_KIT_DATA/models): `stdlib-target/` and `stdlib-draft/`
(config.json + model.safetensors, as `save_pretrained` writes them), `stdlib-tokenizer.json`,
`stdlib-heldout-slice.safetensors` (a fixed slice of the held-out split's tokens, so the recorded
perplexity can be checked on any Python version) and `stdlib-pair.json` (how they were trained and
their held-out perplexities).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import torch
import torch.nn.functional as F

from ...models import llama
from ...paths import data_dir

VOCAB = 2048
SEQ_LEN = 512                 # training windows; the models know positions up to MAX_POSITIONS
MAX_POSITIONS = 1024
SHAPES = {
    "target": dict(dim=192, n_layers=16, n_heads=3, n_kv_heads=1, ffn_dim=512),
    "draft": dict(dim=192, n_layers=1, n_heads=3, n_kv_heads=1, ffn_dim=512),
}
# "target" is the field's (and the record's) name for the model whose tokens are verified; learners read
# "main model" (HF's word in assisted generation), so the notebook looks the role up here.
MAIN_ROLE = "target"
ROLE_LABELS = {MAIN_ROLE: "main model", "draft": "draft"}
NAMES = {MAIN_ROLE: "stdlib-target", "draft": "stdlib-draft"}
TOKENIZER = "stdlib-tokenizer.json"
SLICE = "stdlib-heldout-slice.safetensors"
RECORD = "stdlib-pair.json"


def config(role: str, vocab_size: int = VOCAB) -> llama.ModelConfig:
    """The course Llama config of the target or the draft."""
    if role not in SHAPES:
        raise ValueError(f"role must be one of {sorted(SHAPES)}, got {role!r}")
    return llama.ModelConfig(vocab_size=vocab_size, max_seq_len=MAX_POSITIONS, tie_embeddings=True,
                             name=NAMES[role], **SHAPES[role])


def models_dir() -> Path:
    """data/models (paths.data_dir: $COURSE_KIT_DATA, the checkout, the course wheel)."""
    return data_dir("models")


def available(folder: Path | None = None) -> bool:
    folder = Path(folder) if folder is not None else models_dir()
    return all((folder / NAMES[r] / "config.json").is_file() for r in SHAPES) and (folder / TOKENIZER).is_file()


def load(role: str, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu",
         folder: Path | None = None) -> llama.Transformer:
    """The shipped (or freshly trained) target or draft, as a course Llama."""
    from ...models.hf import model_from_pretrained
    folder = Path(folder) if folder is not None else models_dir()
    path = folder / NAMES.get(role, role)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"no {role} checkpoint at {path}; train one with "
                                f"`python -m course_kit.capstone.speculative.train_pair --out {folder}`")
    model = model_from_pretrained(path, dtype=dtype, device=device)
    model.config.name = NAMES[role]
    return model


def load_pair(dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu", folder: Path | None = None):
    """(target, draft)."""
    return load("target", dtype, device, folder), load("draft", dtype, device, folder)


def random_draft(dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu", seed: int = 1) -> llama.Transformer:
    """An untrained draft of the trained one's shape: what a draft that never learned gets kept."""
    return llama.Transformer.from_config(config("draft"), seed=seed, dtype=dtype, device=device)


def tokenizer(folder: Path | None = None):
    from .corpus import load_tokenizer
    return load_tokenizer((Path(folder) if folder is not None else models_dir()) / TOKENIZER)


def heldout_slice(folder: Path | None = None) -> torch.Tensor:
    """The shipped slice of the held-out split: int64 [windows, SEQ_LEN + 1]."""
    from safetensors.torch import load_file
    path = (Path(folder) if folder is not None else models_dir()) / SLICE
    return load_file(str(path))["tokens"].long()


def record(folder: Path | None = None) -> dict:
    """What training recorded beside the checkpoints (stdlib-pair.json)."""
    path = (Path(folder) if folder is not None else models_dir()) / RECORD
    return json.loads(path.read_text())


@torch.no_grad()
def perplexity(model: llama.Transformer, windows: torch.Tensor, batch: int = 4) -> float:
    """exp(mean next-token cross-entropy) over windows [N, T + 1]: each window predicts its tokens
    1..T from the ones before it, from position 0 (no context carried between windows)."""
    if windows.dim() != 2 or windows.shape[1] < 2:
        raise ValueError(f"windows must be [N, T + 1] with T >= 1, got shape {tuple(windows.shape)}")
    dev = model.tok_embeddings.weight.device
    total, count = 0.0, 0
    for i in range(0, windows.shape[0], batch):
        w = windows[i:i + batch].to(dev)
        logits = model(w[:, :-1]).float()
        total += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1), reduction="sum"))
        count += w[:, 1:].numel()
    return math.exp(total / count)


def windows_of(stream, seq_len: int = SEQ_LEN, limit_tokens: int | None = None) -> torch.Tensor:
    """Non-overlapping windows of seq_len + 1 tokens (consecutive windows share one token) from the
    start of a token stream, at most `limit_tokens` predicted tokens."""
    t = torch.as_tensor(stream, dtype=torch.long)
    n = (len(t) - 1) // seq_len
    if limit_tokens is not None:
        n = min(n, max(1, limit_tokens // seq_len))
    if n < 1:
        raise ValueError(f"a stream of {len(t)} tokens holds no window of {seq_len + 1}")
    return torch.stack([t[i * seq_len:(i + 1) * seq_len + 1] for i in range(n)])
