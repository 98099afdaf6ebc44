"""No 5xx from any request body (issue 24): the real server on 127.0.0.1 under seeded random bodies.

Requests go over raw HTTP/1.1 connections driven by h11 (uvicorn's own parser), so the test sees
whether a keep-alive connection survives an error, which httpx would hide by reconnecting.
Every loop here is bounded in count and time.
"""
import json
import random
import socket
import threading
import time

import h11
import httpx
import pytest

from course_kit.engine import Engine
from course_kit.batching.server import BackgroundServer
from course_kit.batching.guard import json_safe

from test_engine import tiny_model

MAX_BODY = 64 * 1024
BODY_TIMEOUT = 1.5


@pytest.fixture(scope="module")
def server():
    engine = Engine(tiny_model(), policy="continuous", max_num_seqs=4, max_num_batched_tokens=64, block_size=4,
                    check_invariants=True)
    with BackgroundServer(engine, max_body_bytes=MAX_BODY, body_timeout_s=BODY_TIMEOUT) as srv:
        srv.engine = engine
        yield srv


class Conn:
    """One keep-alive HTTP/1.1 connection to the server."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.h = h11.Connection(h11.CLIENT)
        self.closed = False

    def send_head(self, length: int | None, content_type: str = "application/json",
                  path: str = "/v1/completions") -> None:
        headers = [("host", "127.0.0.1"), ("content-type", content_type)]
        headers.append(("content-length", str(length)) if length is not None else ("transfer-encoding", "chunked"))
        self.sock.sendall(self.h.send(h11.Request(method="POST", target=path, headers=headers)))

    def send_data(self, data: bytes) -> None:
        self.sock.sendall(self.h.send(h11.Data(data=data)))

    def finish(self) -> tuple[int, dict, bytes]:
        """End the request and read the whole response (also a streamed one)."""
        if self.h.our_state is h11.SEND_BODY:
            self.sock.sendall(self.h.send(h11.EndOfMessage()))
        return self.read_response()

    def read_response(self) -> tuple[int, dict, bytes]:
        """Read one whole response, whether or not the request was finished (a stalled upload)."""
        status, headers, body = None, {}, b""
        while True:
            event = self.h.next_event()
            if event is h11.NEED_DATA:
                self.h.receive_data(self.sock.recv(65536))
                continue
            if isinstance(event, h11.Response):
                status, headers = event.status_code, {k.decode(): v.decode() for k, v in event.headers}
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                return status, headers, body

    def request(self, body: bytes, content_type: str = "application/json", chunked: bool = False):
        self.send_head(None if chunked else len(body), content_type)
        if body:
            self.send_data(body)
        out = self.finish()
        self.next_cycle()
        return out

    def next_cycle(self) -> None:
        """Ready for the next request, or mark the connection closed by the server."""
        if self.h.our_state is h11.DONE and self.h.their_state is h11.DONE:
            self.h.start_next_cycle()
        else:
            self.closed = True
            self.sock.close()


def wait_idle(srv, timeout=30.0) -> dict:
    deadline = time.time() + timeout
    while True:
        stats = httpx.get(srv.url + "/stats", timeout=10).json()
        if (stats["open_requests"] == 0 and stats["running"] == 0) or time.time() > deadline:
            return stats
        time.sleep(0.05)


# ---------------------------------------------------------------------------- random bodies
FLOATS = [float("nan"), float("inf"), float("-inf"), -0.0, 0.0, 0.5, 1.0, 1.5, 1e308, 5e-324, 1e-300, -1e-9, 100.0]
INTS = [0, 1, 2, 3, -1, 255, 256, 511, 2**31, 2**63, 2**64, -2**63, 10**40]
STRINGS = ["", "hello", "héllo wörld", "\x00", "\ud800", "\udfff\ud800", "😀" * 8, "\u202e" + "abc", "a" * 500,
           "[1, 2]", "NaN", "null"]
FIELDS = ["prompt", "max_tokens", "temperature", "top_k", "top_p", "seed", "ignore_eos", "stream"]


def rand_value(rng: random.Random, depth: int = 0):
    kind = rng.choice(["float", "int", "str", "bool", "null", "list", "dict", "intlist"] if depth < 4
                      else ["float", "int", "str", "bool", "null"])
    if kind == "float":
        return rng.choice(FLOATS + [rng.uniform(-10, 10)])
    if kind == "int":
        return rng.choice(INTS + [rng.randint(-1000, 1000)])
    if kind == "str":
        return rng.choice(STRINGS + ["".join(chr(rng.randint(1, 0x2FFFF)) for _ in range(rng.randint(1, 20)))])
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "null":
        return None
    if kind == "intlist":
        return [rng.choice(INTS[:8] + [rng.randint(3, 255)]) for _ in range(rng.randint(0, 12))]
    if kind == "list":
        return [rand_value(rng, depth + 1) for _ in range(rng.randint(0, 5))]
    return {rng.choice(FIELDS + STRINGS): rand_value(rng, depth + 1) for _ in range(rng.randint(0, 5))}


def rand_body(rng: random.Random) -> tuple[bytes, str]:
    """A body and its content type: mostly a valid request with a few fields replaced at random."""
    req = {"prompt": [rng.randint(3, 255) for _ in range(rng.randint(1, 12))], "max_tokens": rng.randint(1, 4),
           "stream": rng.random() < 0.5}
    shape = rng.random()
    if shape < 0.6:
        for _ in range(rng.randint(1, 3)):
            req[rng.choice(FIELDS + STRINGS)] = rand_value(rng)
        obj = req
    elif shape < 0.75:
        obj = rand_value(rng)
    else:
        obj = req
    text = json.dumps(obj, ensure_ascii=rng.random() < 0.5)           # NaN/Infinity as Python writes them
    body = text.encode("utf-8", "surrogatepass")                       # lone surrogates as invalid UTF-8
    if shape >= 0.75:                                                  # corrupt the bytes
        cut = rng.randint(0, len(body))
        choice = rng.random()
        if choice < 0.3:
            body = body[:cut]
        elif choice < 0.6:
            body = body[:cut] + bytes(rng.randint(0, 255) for _ in range(rng.randint(1, 8))) + body[cut:]
        elif choice < 0.8:
            body = b'{"prompt": [' + b"9" * rng.choice([30, 5000]) + b'], "max_tokens": 2}'
        else:
            body = b"[" * rng.randint(1000, 60000)                     # deep nesting, under the size cap
    ctype = rng.choice(["application/json"] * 6 + ["text/plain", "application/x-www-form-urlencoded",
                                                   "application/json; charset=latin-1", "multipart/form-data"])
    return body, ctype


# ---------------------------------------------------------------------------- tests
def test_json_safe_makes_strict_bounded_json():
    weird = {"a": float("nan"), "b": [float("inf"), -float("inf")], "c": b"\xff\xfe", "d": "\ud800",
             "e": 10**4000, "f": ValueError("x"), "g": list(range(100)), "h": "z" * 1000, 1: {"n": {"n": {}}}}
    out = json_safe(weird)
    text = json.dumps(out, allow_nan=False, ensure_ascii=False)
    text.encode("utf-8")                                # no lone surrogate left
    assert out["a"] == "nan" and out["b"] == ["inf", "-inf"] and out["f"] == "x"
    assert len(out["g"]) == 21 and len(out["h"]) < 300 and "digits" in out["e"]


def test_the_issue_cases_get_422_and_the_connection_stays_usable(server):
    conn = Conn(server.port)
    for field, value in (("temperature", "NaN"), ("temperature", "Infinity"), ("temperature", "-Infinity"),
                         ("top_p", "NaN"), ("top_p", "Infinity")):
        status, _, body = conn.request(f'{{"prompt": [5, 6], "max_tokens": 2, "{field}": {value}}}'.encode())
        assert status == 422, (field, value, status, body)
        assert field in json.loads(body)["detail"][0]["loc"]
        assert not conn.closed, f"the server closed the connection after {field}={value}"
        status, _, body = conn.request(b'{"prompt": [5, 6], "max_tokens": 3, "stream": false}')
        assert status == 200 and len(json.loads(body)["tokens"]) == 3


def test_sampling_settings_the_sampler_cannot_run_are_refused(server):
    for extra, words in (({"temperature": 1e-300}, "temperature"), ({"top_k": 10**6}, "top_k"),
                         ({"seed": 2**64}, "seed"), ({"seed": -1}, "seed"), ({"temperature": 1e6}, "temperature")):
        r = httpx.post(server.url + "/v1/completions", json={"prompt": [5, 6], "max_tokens": 2, **extra}, timeout=30)
        assert r.status_code in (400, 422) and words in r.text, (extra, r.status_code, r.text)


def test_fuzzed_bodies_get_2xx_or_4xx_on_one_connection(server):
    rng = random.Random(24)
    conn, statuses, closes = Conn(server.port), [], 0
    deadline = time.time() + 40
    for i in range(160):
        if time.time() > deadline:
            break
        body, ctype = rand_body(rng)
        status, headers, reply = conn.request(body, ctype, chunked=rng.random() < 0.2)
        assert status is not None and 200 <= status < 500, (i, body[:200], ctype, status, reply[:300])
        statuses.append(status)
        if status < 300 and headers.get("content-type", "").startswith("text/event-stream"):
            assert reply.rstrip().endswith(b"data: [DONE]")
        elif status >= 400:
            json.loads(reply)                                     # every error is strict JSON
        if conn.closed:
            # only an answer that did not read the body may close the connection
            assert status in (408, 413), (i, status, body[:200])
            closes += 1
            conn = Conn(server.port)
    assert len(statuses) >= 60
    assert any(s == 200 for s in statuses) and any(s == 422 for s in statuses) and any(s == 400 for s in statuses)
    stats = wait_idle(server)
    assert stats["used_blocks"] == 0 and stats["last_error"] is None, stats
    assert server.engine.blocks.num_used_blocks == 0
    server.engine.blocks.check_invariants()


def test_huge_bodies_get_413_and_the_server_keeps_serving(server):
    # a declared length over the cap is refused before the body is read
    conn = Conn(server.port)
    conn.send_head(MAX_BODY + 1)
    status, headers, body = conn.read_response()
    assert status == 413 and headers.get("connection") == "close" and "bytes" in json.loads(body)["detail"]
    # no declared length: the cap is counted as the chunks arrive (send just past it, then read)
    conn = Conn(server.port)
    conn.send_head(None)
    for _ in range(MAX_BODY // 4096 + 1):
        conn.send_data(b" " * 4096)
    status, headers, _ = conn.read_response()
    assert status == 413 and headers.get("connection") == "close"
    r = httpx.post(server.url + "/v1/completions", json={"prompt": [5, 6], "max_tokens": 2, "stream": False},
                   timeout=30)
    assert r.status_code == 200


def test_slow_clients(server):
    """A client sending its body a byte at a time is served, and others are served meanwhile;
    one that stalls gets 408 after the body timeout."""
    body = b'{"prompt": [5, 6, 7], "max_tokens": 3, "stream": false}'
    result = {}

    def slow():
        conn = Conn(server.port)
        conn.send_head(len(body))
        for i in range(len(body)):
            conn.send_data(body[i:i + 1])
            time.sleep(0.02)
        result["slow"] = conn.finish()

    t = threading.Thread(target=slow)
    t0 = time.time()
    t.start()
    r = httpx.post(server.url + "/v1/completions", json={"prompt": [9, 10], "max_tokens": 2, "stream": False},
                   timeout=30)
    fast = time.time() - t0
    t.join(timeout=30)
    assert r.status_code == 200 and fast < len(body) * 0.02, "a slow upload held up another client"
    status, _, reply = result["slow"]
    assert status == 200 and len(json.loads(reply)["tokens"]) == 3

    conn = Conn(server.port)
    conn.send_head(len(body))
    conn.send_data(body[:10])
    t0 = time.time()
    status, headers, reply = conn.read_response()
    assert status == 408 and BODY_TIMEOUT * 0.8 < time.time() - t0 < BODY_TIMEOUT + 10
    assert wait_idle(server)["used_blocks"] == 0


def test_a_client_leaving_mid_upload_or_mid_stream_leaks_nothing(server):
    for _ in range(3):
        conn = Conn(server.port)
        conn.send_head(100)
        conn.send_data(b'{"prompt": [5,')
        conn.sock.close()
    conn = Conn(server.port)
    conn.send_head(None)
    conn.send_data(b'{"prompt": [5, 6, 7], "max_tokens": 200, "stream": true}')
    conn.sock.sendall(conn.h.send(h11.EndOfMessage()))
    assert b"200 OK" in conn.sock.recv(4096)
    conn.sock.close()
    stats = wait_idle(server)
    assert stats["used_blocks"] == 0 and stats["open_requests"] == 0, stats
