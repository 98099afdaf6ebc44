"""Guards of `course_kit.batching.server` (notebook 06) against hostile request bodies.

- `json_safe`: validation errors echo the client's input, which may hold NaN, Infinity, bytes,
  lone surrogates or 4000-digit integers; FastAPI's own handler raises while encoding those (a
  500 that also breaks the keep-alive connection). This makes them strict, bounded JSON.
- `BodyLimit`: an ASGI middleware that caps a body's size (413) and its upload time (408).
"""
from __future__ import annotations

import asyncio
import json
import math

MAX_BODY_BYTES = 1 << 20      # 1 MiB holds a prompt of over 100k token ids
BODY_TIMEOUT_S = 30.0         # a client that takes longer to send its body gets 408


def json_safe(obj, depth: int = 0):
    """`obj` made encodable as strict JSON, and bounded: non-finite floats become "nan"/"inf"
    strings, bytes and strings with lone surrogates are escaped, long strings, lists and ints are
    cut, anything else becomes its (cut) str. Validation errors echo the client's input, which
    may hold any of these; FastAPI's own handler would raise while encoding them (a 500)."""
    if obj is None or isinstance(obj, bool):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else repr(obj)
    if isinstance(obj, int):
        # ints past ~4300 digits cannot even be turned into text (sys.get_int_max_str_digits)
        return obj if obj.bit_length() <= 64 else f"<an integer of about {int(obj.bit_length() * 0.30103) + 1} digits>"
    if isinstance(obj, bytes):
        obj = obj.decode("utf-8", "backslashreplace")
    if isinstance(obj, str):
        cut = obj[:200] + ("..." if len(obj) > 200 else "")
        return cut.encode("utf-8", "backslashreplace").decode("utf-8")
    if depth >= 6:
        return "..."
    if isinstance(obj, dict):
        items = list(obj.items())
        out = {str(json_safe(k, depth + 1)): json_safe(v, depth + 1) for k, v in items[:20]}
        if len(items) > 20:
            out["..."] = f"{len(items) - 20} more"
        return out
    if isinstance(obj, (list, tuple)):
        return [json_safe(v, depth + 1) for v in obj[:20]] + ([f"... {len(obj) - 20} more"] if len(obj) > 20 else [])
    return json_safe(str(obj), depth + 1)


class BodyLimit:
    """ASGI middleware: read each request's whole body before the app sees it, answering 413 when
    it is larger than `max_bytes` and 408 when it takes longer than `timeout_s` to arrive (a slow
    client then costs one waiting coroutine, never a half-read request inside the app). Both
    answers close the connection: the rest of the body is never read."""

    def __init__(self, app, max_bytes: int = MAX_BODY_BYTES, timeout_s: float = BODY_TIMEOUT_S) -> None:
        if max_bytes < 1 or not timeout_s > 0:
            raise ValueError(f"max_bytes={max_bytes} must be >= 1 and timeout_s={timeout_s} > 0")
        self.app, self.max_bytes, self.timeout_s = app, max_bytes, timeout_s

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers") or []).get(b"content-length", b"").strip()
        if length.isdigit() and int(length) > self.max_bytes:
            return await self._refuse(send, 413, f"the body declares {int(length)} bytes; at most "
                                                 f"{self.max_bytes} are accepted")
        chunks: list[bytes] = []

        async def read_all() -> bool:           # False when the body was too large
            size = 0
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise ConnectionResetError
                chunks.append(message.get("body", b""))
                size += len(chunks[-1])
                if size > self.max_bytes:
                    return False
                if not message.get("more_body", False):
                    return True
        try:
            complete = await asyncio.wait_for(read_all(), self.timeout_s)
        except asyncio.TimeoutError:
            return await self._refuse(send, 408, f"the body did not arrive within {self.timeout_s} s")
        except ConnectionResetError:
            return None                          # the client left before sending its body
        if not complete:
            return await self._refuse(send, 413, f"the body exceeds {self.max_bytes} bytes")
        body, replayed = b"".join(chunks), False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()               # later: the disconnect a streaming response awaits
        await self.app(scope, replay, send)

    @staticmethod
    async def _refuse(send, status: int, detail: str) -> None:
        payload = json.dumps({"detail": detail}).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"connection", b"close"),
                                (b"content-length", str(len(payload)).encode())]})
        await send({"type": "http.response.body", "body": payload})
