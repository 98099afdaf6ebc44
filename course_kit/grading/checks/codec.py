"""Answers as data: what crosses from a learner's process to the checker's (every notebook's checks).

A value becomes a JSON tree plus arrays. Tensors and numpy arrays travel as `.npy` files read back
with `allow_pickle=False`; tuples, dicts with non-string keys and exceptions raised by the learner's
function are tagged JSON. Nothing is ever pickled, and an object the codec does not know travels as
its type name only, so reading an answer back never runs code. `read` treats the folder as hostile:
regular files only (no symlinks followed), names it chose itself, sizes capped.
"""
from __future__ import annotations

import io
import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any

import numpy as np

MAX_DEPTH = 12
MAX_ITEMS = 200_000            # JSON nodes in one answer
MAX_JSON_BYTES = 8 << 20
MAX_ARRAY_BYTES = 64 << 20     # all arrays of one answer together
_ARRAY_NAME = re.compile(r"^a\d{1,6}\.npy$")
# torch dtypes numpy has no type for travel as same-width integers, with their torch name beside them.
_VIEW_AS = {"torch.bfloat16": "int16", "torch.float8_e4m3fn": "uint8", "torch.float8_e5m2": "uint8",
            "torch.float8_e4m3fnuz": "uint8", "torch.float8_e5m2fnuz": "uint8"}


class AnswerError(ValueError):
    """An answer that cannot be read back: too big, too deep, malformed, or not plain files."""


class Raised:
    """What the learner's function raised, as data: the exception's type name and message."""

    def __init__(self, type_name: str, message: str):
        self.type_name, self.message = str(type_name)[:80], str(message)[:300]

    def __repr__(self) -> str:
        return f"{self.type_name}: {self.message}" if self.message else self.type_name

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Raised) and (self.type_name, self.message) == (other.type_name, other.message)


class Opaque:
    """A value the codec does not carry (a module, a generator...): only its type name crosses."""

    def __init__(self, type_name: str):
        self.type_name = str(type_name)[:80]

    def __repr__(self) -> str:
        return f"<a {self.type_name} object>"


def raised(exc: BaseException) -> Raised:
    return Raised(type(exc).__name__, str(exc))


def encode(value: Any) -> tuple[Any, list[np.ndarray]]:
    """(JSON-able tree, arrays) for a value; arrays are referenced by index from the tree."""
    arrays: list[np.ndarray] = []
    count = [0]

    def enc(v: Any, depth: int) -> Any:
        count[0] += 1
        if count[0] > MAX_ITEMS:
            raise AnswerError(f"the answer has more than {MAX_ITEMS} items")
        if depth > MAX_DEPTH:
            raise AnswerError(f"the answer is nested deeper than {MAX_DEPTH} levels")
        if v is None or isinstance(v, (bool, str)):
            return v
        if isinstance(v, int):
            return v if abs(v) < 1 << 63 else {"$bigint": str(v)}
        if isinstance(v, float):
            return v if math.isfinite(v) else {"$float": repr(v)}
        if isinstance(v, Raised):
            return {"$raised": v.type_name, "message": v.message}
        if isinstance(v, Opaque):
            return {"$opaque": v.type_name}
        if isinstance(v, (list, tuple)) and not hasattr(v, "_fields"):
            items = [enc(x, depth + 1) for x in v]
            return items if isinstance(v, list) else {"$tuple": items}
        if isinstance(v, dict):
            if all(isinstance(k, str) and not k.startswith("$") for k in v):
                return {k: enc(x, depth + 1) for k, x in v.items()}
            return {"$dict": [[enc(k, depth + 1), enc(x, depth + 1)] for k, x in v.items()]}
        if isinstance(v, np.generic):
            return enc(v.item(), depth)
        if isinstance(v, np.ndarray):
            if v.dtype.hasobject:
                return {"$opaque": "numpy object array"}
            arrays.append(np.ascontiguousarray(v))
            return {"$ndarray": len(arrays) - 1}
        tensor = _as_tensor(v)
        if tensor is not None:
            name = str(tensor.dtype)
            t = tensor.detach().cpu().contiguous()
            if name in _VIEW_AS:
                import torch
                t = t.view(getattr(torch, _VIEW_AS[name]))
            try:
                arrays.append(t.numpy())
            except (TypeError, RuntimeError):  # complex32 and other exotic dtypes
                return {"$opaque": f"tensor of dtype {name}"}
            return {"$tensor": len(arrays) - 1, "dtype": name, "shape": list(tensor.shape)}
        return {"$opaque": type(v).__name__}

    tree = enc(value, 0)
    if sum(a.nbytes for a in arrays) > MAX_ARRAY_BYTES:
        raise AnswerError(f"the answer's arrays exceed {MAX_ARRAY_BYTES >> 20} MiB")
    return tree, arrays


def _as_tensor(v: Any) -> Any:
    torch = _torch_if_loaded()
    if torch is not None and isinstance(v, torch.Tensor):
        return v
    return None


def _torch_if_loaded() -> Any:
    import sys
    return sys.modules.get("torch")


def decode(tree: Any, arrays: list[np.ndarray]) -> Any:
    """The value back from `encode`'s output (tensors become torch tensors again)."""
    count = [0]

    def dec(v: Any, depth: int) -> Any:
        count[0] += 1
        if count[0] > MAX_ITEMS or depth > MAX_DEPTH:
            raise AnswerError("the answer is too large or too deeply nested")
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        if isinstance(v, list):
            return [dec(x, depth + 1) for x in v]
        if not isinstance(v, dict):
            raise AnswerError(f"unexpected JSON value of type {type(v).__name__}")
        if "$tuple" in v:
            return tuple(dec(x, depth + 1) for x in _list(v["$tuple"]))
        if "$dict" in v:
            out = {}
            for pair in _list(v["$dict"]):
                if not (isinstance(pair, list) and len(pair) == 2):
                    raise AnswerError("malformed dict entry")
                key = dec(pair[0], depth + 1)
                try:
                    out[key] = dec(pair[1], depth + 1)
                except TypeError as exc:  # an unhashable key
                    raise AnswerError(f"a dict key cannot be used as a key: {exc}") from None
            return out
        if "$bigint" in v:
            return int(_str(v["$bigint"])[:5000])
        if "$float" in v:
            text = _str(v["$float"])
            if text not in ("nan", "inf", "-inf"):
                raise AnswerError(f"malformed float {text[:20]!r}")
            return float(text)
        if "$raised" in v:
            return Raised(_str(v["$raised"]), _str(v.get("message", "")))
        if "$opaque" in v:
            return Opaque(_str(v["$opaque"]))
        if "$ndarray" in v:
            return _array(arrays, v["$ndarray"]).copy()
        if "$tensor" in v:
            return _tensor(_array(arrays, v["$tensor"]), v.get("dtype"), v.get("shape"))
        return {str(k): dec(x, depth + 1) for k, x in v.items()}

    return dec(tree, 0)


def _list(v: Any) -> list:
    if not isinstance(v, list):
        raise AnswerError(f"expected a JSON list, found {type(v).__name__}")
    return v


def _str(v: Any) -> str:
    if not isinstance(v, str):
        raise AnswerError(f"expected a JSON string, found {type(v).__name__}")
    return v


def _array(arrays: list[np.ndarray], index: Any) -> np.ndarray:
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(arrays):
        raise AnswerError(f"array reference {index!r} is out of range")
    return arrays[index]


def _tensor(array: np.ndarray, dtype: Any, shape: Any) -> Any:
    import torch
    name = _str(dtype)
    if not name.startswith("torch.") or not isinstance(getattr(torch, name[6:], None), torch.dtype):
        raise AnswerError(f"unknown tensor dtype {name[:40]!r}")
    t = torch.from_numpy(np.array(array, copy=True))
    if name in _VIEW_AS:
        t = t.view(getattr(torch, name[6:]))
    if str(t.dtype) != name:
        raise AnswerError(f"tensor data of dtype {t.dtype} does not match its declared dtype {name}")
    if not (isinstance(shape, list) and all(isinstance(s, int) and s >= 0 for s in shape)):
        raise AnswerError("malformed tensor shape")
    if math.prod(shape) != t.numel():
        raise AnswerError(f"tensor shape {shape} does not match its {t.numel()} elements")
    return t.reshape(shape)


def roundtrip(value: Any) -> Any:
    """What the checker sees of a value: encoded and decoded (in-process, for interactive checks)."""
    tree, arrays = encode(value)
    return decode(json.loads(json.dumps(tree)), [a.copy() for a in arrays])


# --- files ---------------------------------------------------------------------------------------

def write(folder: Path, value: Any) -> None:
    """Write `value` as `answer.json` plus `aN.npy` files into `folder` (created)."""
    tree, arrays = encode(value)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for i, array in enumerate(arrays):
        np.save(folder / f"a{i}.npy", array, allow_pickle=False)
    tmp = folder / ".answer.json.tmp"
    tmp.write_text(json.dumps({"tree": tree, "arrays": len(arrays)}))
    os.replace(tmp, folder / "answer.json")


def _read_regular(folder: Path, name: str, limit: int) -> bytes:
    """A regular file directly in `folder`, opened without following links, at most `limit` bytes."""
    path = os.path.join(folder, name)
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise AnswerError(f"{name} is not a regular file")
        if info.st_size > limit:
            raise AnswerError(f"{name} is larger than {limit >> 20} MiB")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise AnswerError(f"{name} is larger than {limit >> 20} MiB")
    return data


def read(folder: Path) -> Any:
    """Read an answer folder written by `write` (by a hostile process: checked at every step)."""
    folder = Path(folder)
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode):
        raise AnswerError("the answer is not a folder")
    try:
        head = json.loads(_read_regular(folder, "answer.json", MAX_JSON_BYTES))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise AnswerError(f"answer.json is not valid JSON ({type(exc).__name__})") from None
    if not isinstance(head, dict) or not isinstance(head.get("arrays"), int) or "tree" not in head:
        raise AnswerError("answer.json does not have the answer layout")
    count = head["arrays"]
    if not 0 <= count <= 10_000:
        raise AnswerError(f"answer.json declares {count} arrays")
    arrays, budget = [], MAX_ARRAY_BYTES + (1 << 20)
    for i in range(count):
        name = f"a{i}.npy"
        assert _ARRAY_NAME.match(name)
        data = _read_regular(folder, name, budget)
        budget -= len(data)
        try:
            arrays.append(np.load(io.BytesIO(data), allow_pickle=False))
        except Exception as exc:  # malformed header, object arrays (need pickle), truncated data
            raise AnswerError(f"{name} is not a plain .npy array ({type(exc).__name__})") from None
    return decode(head["tree"], arrays)
