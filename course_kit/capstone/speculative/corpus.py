"""The text the course trains its own models on: the Python standard library's `.py` sources.

Every Python install carries them, so nothing is downloaded. The files are listed from the running
interpreter (`sysconfig`'s stdlib folder), in sorted order of their paths relative to it; a file is
held out when the CRC-32 of that path falls in `HELDOUT_EVERY`'s residue class, so the split is the
same on every run of one Python version and moves little between versions. Left out: test suites
(generated inputs, huge literals), `site-packages`, the codec tables in `encodings/`, pydoc's
topic strings, and files over `MAX_FILE_BYTES`.

Tokens: a byte-level BPE (the `tokenizers` package, a transformers dependency) trained on the
training split, or, without it, one token per byte (`ByteTokenizer`).
"""
from __future__ import annotations

import json
import sysconfig
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HELDOUT_EVERY = 20                     # 1 file in 20 (by path hash) is held out
SKIP_PARTS = {"test", "tests", "idle_test", "site-packages", "encodings", "pydoc_data", "__pycache__",
              "lib2to3", "turtledemo"}
MAX_FILE_BYTES = 300_000
SEPARATOR = "\n\n"                     # between files in a token stream


def stdlib_root() -> Path:
    """The running interpreter's standard-library folder."""
    return Path(sysconfig.get_paths()["stdlib"])


def is_heldout(relative: str) -> bool:
    return zlib.crc32(relative.encode()) % HELDOUT_EVERY == 0


def stdlib_files(root: Path | None = None) -> list[str]:
    """Relative paths of the corpus's files, sorted."""
    root = Path(root) if root is not None else stdlib_root()
    out = []
    for p in root.rglob("*.py"):
        rel = p.relative_to(root)
        if SKIP_PARTS & set(rel.parts[:-1]) or rel.name.startswith("_sysconfigdata"):
            continue
        if p.stat().st_size > MAX_FILE_BYTES:
            continue
        out.append(rel.as_posix())
    if not out:
        raise FileNotFoundError(f"no .py files under {root}: is this Python's standard library?")
    return sorted(out)


@dataclass(frozen=True)
class Corpus:
    root: str
    train: tuple[str, ...]
    heldout: tuple[str, ...]

    def texts(self, split: str) -> list[str]:
        """The texts of the files of `split` ("train" or "heldout"), undecodable bytes replaced."""
        if split not in ("train", "heldout"):
            raise ValueError(f"split must be 'train' or 'heldout', got {split!r}")
        files = self.train if split == "train" else self.heldout
        root = Path(self.root)
        return [(root / f).read_text(encoding="utf-8", errors="replace") for f in files]

    def describe(self) -> dict:
        import platform
        return {"source": "Python standard library .py files", "python": platform.python_version(),
                "train_files": len(self.train), "heldout_files": len(self.heldout),
                "heldout_rule": f"crc32(relative path) % {HELDOUT_EVERY} == 0",
                "skipped_folders": sorted(SKIP_PARTS), "max_file_bytes": MAX_FILE_BYTES}


def load_corpus(root: Path | None = None) -> Corpus:
    root = Path(root) if root is not None else stdlib_root()
    files = stdlib_files(root)
    return Corpus(str(root), tuple(f for f in files if not is_heldout(f)), tuple(f for f in files if is_heldout(f)))


# ----------------------------------------------------------------------------- tokenizers

class ByteTokenizer:
    """One token per UTF-8 byte: the fallback when the `tokenizers` package is missing."""
    kind = "bytes"
    vocab_size = 256

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        return bytes(int(i) for i in ids).decode("utf-8", errors="replace")

    def save(self, path: Path) -> None:
        Path(path).write_text(json.dumps({"kind": "bytes"}))


class BPETokenizer:
    """A byte-level BPE (GPT-2's pre-tokenisation and byte alphabet) from the `tokenizers` package."""
    kind = "bpe"

    def __init__(self, tok):
        self.tok = tok
        self.vocab_size = tok.get_vocab_size()

    @classmethod
    def train(cls, text_chunks, vocab_size: int) -> "BPETokenizer":
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
        if not 257 <= vocab_size <= 65536:
            raise ValueError(f"vocab_size must be in [257, 65536] (bytes plus merges), got {vocab_size}")
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train_from_iterator(text_chunks, trainer=trainer)
        return cls(tok)

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text).ids

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode([int(i) for i in ids])

    def save(self, path: Path) -> None:
        self.tok.save(str(path))


def load_tokenizer(path: Path):
    """The tokenizer saved at `path` (a tokenizers JSON, or the byte tokenizer's marker)."""
    data = json.loads(Path(path).read_text())
    if data.get("kind") == "bytes":
        return ByteTokenizer()
    from tokenizers import Tokenizer
    return BPETokenizer(Tokenizer.from_file(str(path)))


def make_tokenizer(corpus: Corpus, vocab_size: int, kind: str = "bpe"):
    """Train a BPE of `vocab_size` on the training split, or the byte tokenizer (kind="bytes", or
    "bpe" when `tokenizers` cannot be imported)."""
    if kind not in ("bpe", "bytes"):
        raise ValueError(f"tokenizer kind must be 'bpe' or 'bytes', got {kind!r}")
    if kind == "bpe":
        try:
            import tokenizers  # noqa: F401
        except ImportError:
            print("tokenizers is not importable: falling back to one token per byte")
            kind = "bytes"
    if kind == "bytes":
        return ByteTokenizer()
    return BPETokenizer.train([SEPARATOR + t for t in corpus.texts("train")], vocab_size)


def encode_stream(tokenizer, texts: list[str]) -> np.ndarray:
    """The files' token ids, each file preceded by SEPARATOR, as one int32 array."""
    ids: list[int] = []
    for t in texts:
        ids.extend(tokenizer.encode(SEPARATOR + t))
    return np.asarray(ids, dtype=np.int32)
