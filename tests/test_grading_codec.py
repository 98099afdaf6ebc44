"""Answers as data (course_kit/grading/checks/codec.py): what a sandboxed run writes is read back
without ever running code, and a hostile answer folder is an error, never a crash or a pass."""
from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
import torch

from course_kit.grading.checks import codec, verdict
from course_kit.grading.checks.registry import get


def test_roundtrip_keeps_types_dtypes_and_special_values():
    value = {"t": torch.arange(6, dtype=torch.bfloat16).reshape(2, 3), "i": torch.tensor([1, 2]),
             "f8": torch.tensor([1.0, -2.0]).to(torch.float8_e4m3fn), "nan": float("nan"), "inf": -math.inf,
             (300.0, "int8"): "saturated", "big": 10 ** 30, "tuple": (1, [2, 3]), "np": np.float32(1.5),
             "raised": codec.Raised("ValueError", "bad"), "obj": object()}
    back = codec.roundtrip(value)
    assert back["t"].dtype == torch.bfloat16 and torch.equal(back["t"], value["t"])
    assert back["i"].dtype == torch.int64 and back["f8"].dtype == torch.float8_e4m3fn
    assert math.isnan(back["nan"]) and back["inf"] == -math.inf and back["big"] == 10 ** 30
    assert back[(300.0, "int8")] == "saturated" and back["tuple"] == (1, [2, 3]) and back["np"] == 1.5
    assert back["raised"] == codec.Raised("ValueError", "bad")
    assert isinstance(back["obj"], codec.Opaque) and back["obj"].type_name == "object"


def test_files_roundtrip(tmp_path):
    codec.write(tmp_path / "a", {"x": torch.ones(3), "y": [1, 2]})
    back = codec.read(tmp_path / "a")
    assert torch.equal(back["x"], torch.ones(3)) and back["y"] == [1, 2]


def _answer(tmp_path, tree, arrays=0):
    folder = tmp_path / "ans"
    folder.mkdir(exist_ok=True)
    (folder / "answer.json").write_text(json.dumps({"tree": tree, "arrays": arrays}))
    return folder


def test_hostile_answer_folders_are_refused(tmp_path):
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps({"tree": 1, "arrays": 0}))
    linked = tmp_path / "linked"
    linked.mkdir()
    os.symlink(target, linked / "answer.json")
    with pytest.raises(OSError):                       # O_NOFOLLOW: a link is not opened
        codec.read(linked)
    folder = _answer(tmp_path, {"$ndarray": 0}, arrays=1)
    np.save(folder / "a0.npy", np.array([object()], dtype=object), allow_pickle=True)
    with pytest.raises(codec.AnswerError, match="plain .npy"):   # an object array needs pickle
        codec.read(folder)
    os.mkfifo(tmp_path / "fifo")
    fifo_dir = tmp_path / "fifo_dir"
    fifo_dir.mkdir()
    os.mkfifo(fifo_dir / "answer.json")
    with pytest.raises(codec.AnswerError, match="not a regular file"):
        codec.read(fifo_dir)
    for tree, why in [({"$tensor": 0, "dtype": "torch.float32", "shape": [5]}, "out of range"),
                      ({"$tensor": 0, "dtype": "os.system", "shape": [1]}, "out of range"),
                      ({"$float": "1e999"}, "malformed float"), ({"$dict": [[[1], 2]]}, "cannot be used as a key")]:
        with pytest.raises(codec.AnswerError, match=why):
            codec.read(_answer(tmp_path, tree))
    deep = _answer(tmp_path, None)
    (deep / "answer.json").write_text('{"tree": ' + "[" * 100000 + "]" * 100000 + ', "arrays": 0}')
    with pytest.raises(codec.AnswerError):
        codec.read(deep)
    big = _answer(tmp_path, None)
    (big / "answer.json").write_bytes(b" " * (codec.MAX_JSON_BYTES + 1))
    with pytest.raises(codec.AnswerError, match="larger than"):
        codec.read(big)


def test_a_forged_answer_cannot_pass_a_function_check():
    spec = get("99.add")
    ok = {"results": [5, 0, 42], "values": []}
    assert verdict.outcome(spec, ok)[0] == "passed"
    for forged in [{"results": [5, 0]}, {"results": "passed"}, {"values": [lambda a, b: a + b]},
                   {"results": [5, 0, codec.Opaque("function")]}, {"probe": True}, ["passed"]]:
        assert verdict.outcome(spec, forged)[0] != "passed", forged
