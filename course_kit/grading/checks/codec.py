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
MAX_ARRAY_BYTES = 16 << 20     # one array
MAX_ANSWER_BYTES = 64 << 20    # all arrays of one answer together
MAX_TOTAL_BYTES = 256 << 20    # all answers one checker process reads (codec.Budget)
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
    if any(a.nbytes > MAX_ARRAY_BYTES for a in arrays):
        raise AnswerError(f"an array of the answer exceeds {MAX_ARRAY_BYTES >> 20} MiB")
    if sum(a.nbytes for a in arrays) > MAX_ANSWER_BYTES:
        raise AnswerError(f"the answer's arrays exceed {MAX_ANSWER_BYTES >> 20} MiB together")
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
    """The value back from `encode`'s output (tensors become torch tensors again). An array referenced
    more than once (only a forged answer does that) is decoded once and shared, never copied."""
    count = [0]
    memo: dict[int, tuple[Any, Any]] = {}

    def shared(index: Any, declared: Any, make) -> Any:
        array = _array(arrays, index)
        if index not in memo:
            memo[index] = (declared, make(array))
        elif memo[index][0] != declared:
            raise AnswerError(f"array {index} is referenced twice with different types")
        return memo[index][1]

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
            text = _str(v["$bigint"])
            if not re.fullmatch(r"-?\d{1,4000}", text):
                raise AnswerError(f"malformed big integer {text[:20]!r}")
            return int(text)
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
            return shared(v["$ndarray"], "ndarray", lambda a: a)
        if "$tensor" in v:
            declared = (v.get("dtype"), json.dumps(v.get("shape"))[:200])
            return shared(v["$tensor"], declared, lambda a: _tensor(a, v.get("dtype"), v.get("shape")))
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
    """A tensor sharing the array's memory, after checking that its data can be one: plain numbers in
    this machine's byte order, of the declared dtype and size (anything else is an AnswerError)."""
    import torch
    name = _str(dtype)
    if not name.startswith("torch.") or not isinstance(getattr(torch, name[6:], None), torch.dtype):
        raise AnswerError(f"unknown tensor dtype {name[:40]!r}")
    kind = array.dtype
    if kind.kind not in "biufc" or kind.fields is not None or kind.subdtype is not None or not kind.isnative:
        raise AnswerError(f"a tensor's data must be plain numbers, found numpy dtype {str(kind)[:40]}")
    if not (isinstance(shape, list) and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                                            for s in shape)):
        raise AnswerError("malformed tensor shape")
    try:
        t = torch.from_numpy(np.ascontiguousarray(array))
        if name in _VIEW_AS:
            t = t.view(getattr(torch, name[6:]))
    except (TypeError, RuntimeError, ValueError) as exc:   # a dtype torch cannot take, a view of the wrong width
        raise AnswerError(f"tensor data of numpy dtype {kind} cannot be a {name} ({type(exc).__name__})") from None
    if str(t.dtype) != name:
        raise AnswerError(f"tensor data of dtype {t.dtype} does not match its declared dtype {name}")
    if math.prod(shape) != t.numel():
        raise AnswerError(f"tensor shape {shape[:8]} does not match its {t.numel()} elements")
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


class Budget:
    """Bytes of arrays that one checker process may still read, over all the answers it judges: each
    array's size is taken from this budget before the array is read."""

    def __init__(self, total: int = MAX_TOTAL_BYTES):
        self.total, self.left = total, total

    def take(self, nbytes: int) -> None:
        if nbytes > self.left:
            raise AnswerError(f"the answers of this notebook together exceed {self.total >> 20} MiB of arrays")
        self.left -= nbytes


def _open_regular(folder: Path, name: str) -> int:
    """A file directly in `folder`, opened without following links; it must be a regular file."""
    fd = os.open(os.path.join(folder, name), os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise AnswerError(f"{name} is not a regular file")
    return fd


def _read_fd(fd: int, size: int, name: str) -> bytearray:
    """Exactly `size` bytes (a writable buffer), or an AnswerError if the file holds more or fewer."""
    data = bytearray(size)
    view, got = memoryview(data), 0
    while got < size:
        n = os.readv(fd, [view[got:]])
        if n == 0:
            break
        got += n
    if got != size or os.read(fd, 1):
        raise AnswerError(f"{name} changed size while it was read")
    return data


def _read_regular(folder: Path, name: str, limit: int) -> bytes:
    """A regular file directly in `folder`, opened without following links, at most `limit` bytes."""
    fd = _open_regular(folder, name)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise AnswerError(f"{name} is larger than {limit >> 20} MiB")
        return bytes(_read_fd(fd, size, name))
    finally:
        os.close(fd)


def _read_npy(folder: Path, name: str, caps: dict[str, int], budget: Budget) -> np.ndarray:
    """One .npy file as an array sharing its buffer: its header is parsed first, and the size it
    declares is checked against the caps (one array, this answer, the whole run) before any data is
    read. Only plain dtypes (no objects, so no pickle) are accepted."""
    fd = _open_regular(folder, name)
    try:
        size = os.fstat(fd).st_size
        head = os.pread(fd, min(size, 1 << 16), 0)
        try:
            stream = io.BytesIO(head)
            version = np.lib.format.read_magic(stream)
            if version not in ((1, 0), (2, 0)):
                raise ValueError(f"format version {version}")
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, fortran, dtype = read(stream)
        except Exception as exc:  # malformed header: ValueError, SyntaxError, ... all of them the answer's error
            raise AnswerError(f"{name} is not a plain .npy array ({type(exc).__name__})") from None
        if dtype.hasobject:
            raise AnswerError(f"{name} is not a plain .npy array (it holds objects)")
        nbytes = math.prod(shape) * dtype.itemsize
        offset = stream.tell()
        if nbytes > MAX_ARRAY_BYTES:
            raise AnswerError(f"{name} declares {nbytes >> 20} MiB, over the {MAX_ARRAY_BYTES >> 20} MiB of one array")
        if nbytes > caps["answer"]:
            raise AnswerError(f"the answer's arrays exceed {MAX_ANSWER_BYTES >> 20} MiB together")
        if size != offset + nbytes:
            raise AnswerError(f"{name} holds {size - offset} bytes of data for {nbytes} declared")
        budget.take(nbytes)
        caps["answer"] -= nbytes
        os.lseek(fd, 0, os.SEEK_SET)
        data = _read_fd(fd, size, name)
    finally:
        os.close(fd)
    if nbytes == 0:
        return np.empty(shape, dtype=dtype, order="F" if fortran else "C")
    flat = np.frombuffer(data, dtype=dtype, count=math.prod(shape), offset=offset)
    return flat.reshape(shape, order="F" if fortran else "C")


def read(folder: Path, budget: Budget | None = None) -> Any:
    """Read an answer folder written by `write` (by a hostile process: checked at every step).
    `budget`: shared by every answer one checker process reads (a fresh one by default)."""
    folder = Path(folder)
    budget = budget or Budget()
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode):
        raise AnswerError("the answer is not a folder")
    text = _read_regular(folder, "answer.json", MAX_JSON_BYTES)
    try:
        head = json.loads(text)
    except (ValueError, RecursionError) as exc:   # JSONDecodeError, UnicodeDecodeError, an int of 5000 digits
        raise AnswerError(f"answer.json is not valid JSON ({type(exc).__name__})") from None
    if not isinstance(head, dict) or not isinstance(head.get("arrays"), int) or "tree" not in head:
        raise AnswerError("answer.json does not have the answer layout")
    count = head["arrays"]
    if not 0 <= count <= 10_000:
        raise AnswerError(f"answer.json declares {count} arrays")
    caps = {"answer": MAX_ANSWER_BYTES}
    arrays = []
    for i in range(count):
        name = f"a{i}.npy"
        assert _ARRAY_NAME.match(name)
        arrays.append(_read_npy(folder, name, caps, budget))
    return decode(head["tree"], arrays)
