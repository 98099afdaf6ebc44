"""Streaming load clients for `course-kit bench serving` (notebook 06): open-loop Poisson senders.

Each request is one HTTP/1.1 connection to a server on localhost (the bench never sends anywhere
else), written and read with raw asyncio streams: httpx's per-line cost would make the client,
not the server, the bottleneck at tens of thousands of tokens a second. A request is sent at its
scheduled time whether or not earlier ones have finished (open loop: a slow server gets a queue,
as a real one does). Two response dialects:

- "course": `course_kit.batching.server` (`data: {"token": id}` per token, a summary, `data: [DONE]`);
- "openai": an OpenAI-style /v1/completions stream (one `choices[0].text` chunk per token, a
  final chunk with `finish_reason` and `usage`), as `transformers serve` sends.

`run_load` spreads the requests over worker processes when asked, so that parsing the streams
does not compete with itself for one interpreter; all processes share one start time.
"""
from __future__ import annotations

import asyncio
import json
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict

from .loadgen import ClientTiming

DIALECTS = ("course", "openai")


def request_body(dialect: str, prompt: list[int], max_tokens: int) -> bytes:
    """The JSON body asking for exactly `max_tokens` greedy tokens after `prompt` (token ids).
    For "openai" the prompt is text: one word `t<id>` per token id, which the peer's word-level
    tokenizer maps back to the same ids (see benchmarks/serving.py)."""
    if dialect == "course":
        body = {"prompt": prompt, "max_tokens": max_tokens, "stream": True, "ignore_eos": True, "temperature": 0}
    elif dialect == "openai":
        body = {"prompt": " ".join(f"t{t}" for t in prompt), "max_tokens": max_tokens, "stream": True,
                "temperature": 0}
    else:
        raise ValueError(f"dialect={dialect!r}; choose one of {DIALECTS}")
    return json.dumps(body).encode()


def greedy_tokens(port: int, dialect: str, prompt: list[int], max_tokens: int, host: str = "127.0.0.1",
                  timeout_s: float = 120.0) -> list[int]:
    """One non-streamed greedy completion's token ids (for checking that two servers do the same work)."""
    import httpx
    body = json.loads(request_body(dialect, prompt, max_tokens))
    body["stream"] = False
    r = httpx.post(f"http://{host}:{port}/v1/completions", json=body, timeout=timeout_s)
    r.raise_for_status()
    if dialect == "course":
        return list(r.json()["tokens"])
    words = r.json()["choices"][0]["text"].split()
    return [int(w[1:]) for w in words if w[:1] == "t" and w[1:].isdigit()]


async def _stream_one(host: str, port: int, body: bytes, dialect: str, timing: ClientTiming, t0: float,
                      path: str = "/v1/completions") -> None:
    """Send one request at timing.send_at (s after t0, perf_counter) and fill in `timing`."""
    delay = t0 + timing.send_at - time.perf_counter()
    if delay > 0:
        await asyncio.sleep(delay)
    writer = None
    try:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(b"POST %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\nConnection: close\r\n\r\n" % (path.encode(), host.encode(), port,
                                                                          len(body)) + body)
        status = (await reader.readline()).split(b" ", 2)
        chunked = False
        while True:
            line = await reader.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            if line.lower().startswith(b"transfer-encoding:") and b"chunked" in line.lower():
                chunked = True
        if len(status) < 2 or status[1] != b"200":
            rest = await reader.read(2000)
            timing.error = f"HTTP {b' '.join(status[1:]).decode(errors='replace').strip()}: " \
                           f"{rest.decode(errors='replace')[:300]}"
            return
        buf = b""
        while True:
            if chunked:
                size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    break
                data = await reader.readexactly(size + 2)
                data = data[:-2]
            else:
                data = await reader.read(65536)
                if not data:
                    break
            now = time.perf_counter() - t0
            buf += data
            while b"\n\n" in buf:
                event, buf = buf.split(b"\n\n", 1)
                for line in event.split(b"\n"):
                    if line.startswith(b"data: ") and _on_event(line[6:], dialect, timing, now):
                        return
    except (OSError, asyncio.IncompleteReadError, ValueError) as err:
        timing.error = f"{type(err).__name__}: {err}"[:300]
    finally:
        if writer is not None:
            writer.close()


def _on_event(payload: bytes, dialect: str, timing: ClientTiming, now: float) -> bool:
    """Account one SSE event; True when the stream is over."""
    if payload.strip() == b"[DONE]":
        return True
    if dialect == "course":
        if b'"token"' in payload:
            _token(timing, now)
            return False
        event = json.loads(payload)
        if event.get("done"):
            if event.get("finish_reason") != "length":
                timing.error = f"finish_reason {event.get('finish_reason')!r}"
        return False
    if b'"finish_reason"' not in payload and b'"error"' not in payload:
        _token(timing, now)                  # one text chunk per token
        return False
    event = json.loads(payload)
    if "error" in event:
        timing.error = str(event["error"])[:300]
        return True
    used = (event.get("usage") or {}).get("completion_tokens")
    if used is not None and used != timing.tokens:
        timing.error = f"usage says {used} tokens, {timing.tokens} chunks arrived"
    return True


def _token(timing: ClientTiming, now: float) -> None:
    timing.tokens += 1
    if timing.first is None:
        timing.first = now
    timing.last = now


async def _run(host: str, port: int, dialect: str, items: list[tuple[float, bytes, int]], t0: float,
               timeout_s: float) -> list[ClientTiming]:
    timings = [ClientTiming(send_at, expected) for send_at, _, expected in items]

    async def one(timing, body):
        try:
            await asyncio.wait_for(_stream_one(host, port, body, dialect, timing, t0),
                                   timeout_s + timing.send_at)
        except asyncio.TimeoutError:
            timing.error = f"no complete answer within {timeout_s} s of its send time"
    await asyncio.gather(*(one(t, body) for t, (_, body, _) in zip(timings, items)))
    return timings


def _worker(host: str, port: int, dialect: str, items: list, start_wall: float, timeout_s: float) -> list[dict]:
    # perf_counter has no shared origin across processes: anchor this process's clock to the wall
    # clock's agreed start time
    t0 = time.perf_counter() + (start_wall - time.time())
    return [asdict(t) for t in asyncio.run(_run(host, port, dialect, items, t0, timeout_s))]


def _noop(_: int) -> int:
    return 0


class LoadClient:
    """Sends load to one server: `with LoadClient(port, "course", workers=4) as c: c.run(items)`.

    `items`: (send time in s from the start, body, expected output tokens) per request."""

    def __init__(self, port: int, dialect: str, workers: int = 1, host: str = "127.0.0.1") -> None:
        if dialect not in DIALECTS:
            raise ValueError(f"dialect={dialect!r}; choose one of {DIALECTS}")
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError(f"host={host!r}: the load client only sends to this machine (127.0.0.1)")
        if workers < 1:
            raise ValueError(f"workers={workers} must be >= 1")
        self.host, self.port, self.dialect, self.workers = host, port, dialect, workers
        self.pool = None

    def __enter__(self) -> "LoadClient":
        if self.workers > 1:
            import multiprocessing
            self.pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"))
            list(self.pool.map(_noop, range(self.workers)))      # start them before anything is timed
        return self

    def __exit__(self, *exc) -> None:
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)

    def run(self, items: list[tuple[float, bytes, int]], timeout_s: float = 120.0) -> list[ClientTiming]:
        """Send every item at its time; return one ClientTiming per item, in order."""
        start = time.time() + 0.2
        if self.pool is None:
            return [ClientTiming(**d) for d in _worker(self.host, self.port, self.dialect, items, start, timeout_s)]
        parts = [items[k::self.workers] for k in range(self.workers)]
        futures = [self.pool.submit(_worker, self.host, self.port, self.dialect, part, start, timeout_s)
                   for part in parts]
        out: list[ClientTiming | None] = [None] * len(items)
        for k, fut in enumerate(futures):
            for j, d in enumerate(fut.result()):
                out[k + j * self.workers] = ClientTiming(**d)
        return out  # type: ignore[return-value]
