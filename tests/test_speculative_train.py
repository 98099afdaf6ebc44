"""The corpus, tokenizers and training loop behind the course's own pair (speculative/corpus.py, train_pair.py)."""
import zlib

import pytest
import torch

from course_kit.models import llama
from course_kit.capstone.speculative import corpus as C
from course_kit.capstone.speculative import pair as P
from course_kit.capstone.speculative import train_pair as T


def test_the_corpus_is_the_stdlib_in_a_fixed_order_with_a_hashed_split(tmp_path):
    for rel in ("b.py", "a/x.py", "a/test/t.py", "site-packages/s.py", "encodings/e.py", "a/y.txt"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x = 1\n")
    assert C.stdlib_files(tmp_path) == ["a/x.py", "b.py"]
    corpus = C.load_corpus(tmp_path)
    assert set(corpus.train) | set(corpus.heldout) == {"a/x.py", "b.py"}
    assert all((zlib.crc32(f.encode()) % C.HELDOUT_EVERY == 0) == (f in corpus.heldout) for f in corpus.train + corpus.heldout)
    real = C.load_corpus()                       # this interpreter's: a few hundred files, 1 in ~20 held out
    assert len(real.train) > 200 and 0.02 < len(real.heldout) / len(real.train) < 0.12
    with pytest.raises(FileNotFoundError, match="no .py files"):
        C.stdlib_files(tmp_path / "a" / "test" / "none")


def test_byte_tokenizer_and_streams_round_trip():
    tok = C.ByteTokenizer()
    text = "def f():\n    return 'é'\n"
    assert tok.decode(tok.encode(text)) == text
    stream = C.encode_stream(tok, ["a", "b"])
    assert tok.decode(stream.tolist()) == C.SEPARATOR + "a" + C.SEPARATOR + "b"


def test_lr_schedule_warms_up_then_decays_to_a_tenth():
    lrs = [T.lr_at(s, 100, 1.0, 10) for s in range(100)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert lrs[-1] == pytest.approx(0.1, abs=1e-3) and all(a >= b for a, b in zip(lrs[10:], lrs[11:]))


def _tiny(layers=1):
    return llama.ModelConfig(vocab_size=16, dim=32, n_layers=layers, n_heads=2, n_kv_heads=1, ffn_dim=64,
                             max_seq_len=64)


def _stream():
    g = torch.Generator().manual_seed(0)
    motif = torch.randint(0, 16, (7,), generator=g)
    return motif.repeat(300)                     # a period-7 sequence: learnable in a few steps


def test_training_learns_and_distillation_pulls_the_student_to_the_teacher():
    stream = _stream()
    model, log = T.train_model(_tiny(2), stream, steps=25, batch=4, seq_len=16, lr=2e-2, warmup=3, log_every=8)
    losses = [v for _, v in log["losses"]]
    assert losses[-1] < 0.3 * losses[0] and log["tokens_seen"] == 25 * 4 * 16
    student = T.fresh_model(_tiny(1), seed=5, device="cpu")
    x = stream[:17][None]

    def kl():
        with torch.no_grad():
            p = torch.log_softmax(model(x[:, :-1]), -1)
            q = torch.log_softmax(student(x[:, :-1]), -1)
        return float((p.exp() * (p - q)).sum(-1).mean())
    before = kl()
    student, _ = T.train_model(_tiny(1), stream, steps=20, batch=4, seq_len=16, lr=2e-2, warmup=3, model=student,
                               teacher=model.eval(), log_every=10)
    assert kl() < 0.5 * before


def test_the_fp16_mode_steps_through_the_courses_loss_scaler():
    _, log = T.train_model(_tiny(1), _stream(), steps=3, batch=2, seq_len=16, precision="fp16_scaler", log_every=1)
    assert log["precision"] == "fp16_scaler" and len(log["losses"]) == 3
    assert T.precision_for(torch.device("cpu")) == "fp32"
    with pytest.raises(ValueError, match="unknown precision"):
        T.train_model(_tiny(1), _stream(), steps=1, precision="fp7")


def test_pair_shapes_make_the_draft_about_a_tenth_and_windows_tile_the_stream():
    t, d = P.config("target"), P.config("draft")
    assert 0.08 < d.num_params() / t.num_params() < 0.15 and t.head_dim == d.head_dim == 64
    w = P.windows_of(torch.arange(1 + 3 * 8), seq_len=8)
    assert w.shape == (3, 9) and torch.equal(w[1, 0], w[0, -1])     # consecutive windows share a token
    with pytest.raises(ValueError, match="role must be one of"):
        P.config("oracle")
