"""The real server on localhost: concurrent streaming clients, disconnects, malformed requests."""
import asyncio
import json
import time

import httpx
import pytest
import torch

from course_kit.engine import Engine
from course_kit.batching.server import BackgroundServer

from test_engine import tiny_model
from course_kit.models.hf import model_to_hf


@pytest.fixture(scope="module")
def model():
    return tiny_model()


@pytest.fixture(scope="module")
def server(model):
    engine = Engine(model, policy="continuous", max_num_seqs=4, max_num_batched_tokens=64, block_size=4,
                    check_invariants=True)
    with BackgroundServer(engine) as srv:
        srv.engine = engine
        yield srv


async def stream(client, url, prompt, n, stop_after=None):
    """POST a streaming completion; return the tokens received (and the final summary)."""
    tokens, final = [], None
    async with client.stream("POST", url + "/v1/completions",
                             json={"prompt": prompt, "max_tokens": n, "stream": True}) as resp:
        assert resp.status_code == 200
        async for line in resp.aiter_lines():
            if not line.startswith("data: "):
                continue
            data = line[len("data: "):]
            if data == "[DONE]":
                break
            event = json.loads(data)
            if event.get("done"):
                final = event
            else:
                tokens.append(event["token"])
                if stop_after is not None and len(tokens) >= stop_after:
                    return tokens, None          # leaving the block closes the connection
    return tokens, final


def test_concurrent_streaming_clients_get_complete_correct_outputs(server, model):
    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(3, 256, (n,), generator=g).tolist() for n in (4, 19, 7, 31, 12, 2)]
    news = [12, 5, 20, 9, 15, 7]

    async def main():
        async with httpx.AsyncClient(timeout=60) as client:
            return await asyncio.gather(*(stream(client, server.url, p, n) for p, n in zip(prompts, news)))
    results = asyncio.run(main())
    hf = model_to_hf(model)
    for (tokens, final), p, n in zip(results, prompts, news):
        with torch.no_grad():
            ref = hf.generate(torch.tensor([p]), max_new_tokens=n, min_new_tokens=n, do_sample=False)
        assert tokens == ref[0, len(p):].tolist()
        assert final["finish_reason"] == "length" and final["tokens"] == tokens
    assert httpx.get(server.url + "/stats").json()["used_blocks"] == 0


def test_disconnecting_client_frees_its_blocks(server):
    async def main():
        async with httpx.AsyncClient(timeout=60) as client:
            return await stream(client, server.url, list(range(3, 40)), 400, stop_after=3)
    tokens, _ = asyncio.run(main())
    assert len(tokens) == 3
    deadline = time.time() + 20
    while time.time() < deadline:
        stats = httpx.get(server.url + "/stats").json()
        if stats["used_blocks"] == 0 and stats["open_requests"] == 0 and stats["running"] == 0:
            break
        time.sleep(0.05)
    assert stats["used_blocks"] == 0, f"blocks still held after the client left: {stats}"
    aborted = [s for s in server.engine.sequences.values() if s.finish_reason == "abort"]
    assert aborted and len(aborted[-1].output) < 400


def test_non_streaming_completion(server):
    r = httpx.post(server.url + "/v1/completions", json={"prompt": [5, 6, 7], "max_tokens": 4, "stream": False},
                   timeout=60)
    assert r.status_code == 200
    body = r.json()
    assert len(body["tokens"]) == 4 and body["finish_reason"] == "length"


@pytest.mark.parametrize("body, status, words", [
    ({"max_tokens": 4}, 422, "prompt"),
    ({"prompt": "hello", "max_tokens": 4}, 422, "prompt"),
    ({"prompt": [1, 2], "max_tokens": 0}, 422, "max_tokens"),
    ({"prompt": [1, 2], "temperature": -1}, 422, "temperature"),
    ({"prompt": [1, 2], "top_p": 1.5}, 422, "top_p"),
    ({"prompt": [], "max_tokens": 4}, 400, "prompt is empty"),
    ({"prompt": [1, 300], "max_tokens": 4}, 400, "outside [0, 256)"),
    ({"prompt": [1] * 500, "max_tokens": 100}, 400, "holds at most 512"),
])
def test_malformed_requests_get_4xx_with_a_clear_message(server, body, status, words):
    r = httpx.post(server.url + "/v1/completions", json=body, timeout=30)
    assert r.status_code == status
    assert words in r.text


def test_invalid_json_is_422(server):
    r = httpx.post(server.url + "/v1/completions", content=b"{not json", timeout=30,
                   headers={"content-type": "application/json"})
    assert r.status_code == 422


def test_cli_registers_serve():
    from course_kit.cli import build_parser
    args = build_parser().parse_args(["serve", "--policy", "static", "--port", "8123", "--max-num-seqs", "8"])
    assert args.policy == "static" and args.port == 8123 and args.max_num_seqs == 8
    assert args.func.__module__ == "course_kit.batching.server"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--policy", "greedy"])


def test_a_failing_step_fails_its_requests_and_the_server_keeps_serving(model):
    engine = Engine(model, policy="continuous", max_num_seqs=2, block_size=4)
    real_step = engine.step
    calls = {"n": 0}

    def flaky(more_coming=False):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("simulated fault")
        return real_step(more_coming)
    engine.step = flaky
    with BackgroundServer(engine) as srv:
        r = httpx.post(srv.url + "/v1/completions", json={"prompt": [5, 6], "max_tokens": 8, "stream": False},
                       timeout=30)
        assert r.json()["finish_reason"].startswith("error: RuntimeError: simulated fault")
        r = httpx.post(srv.url + "/v1/completions", json={"prompt": [5, 6], "max_tokens": 3, "stream": False},
                       timeout=30)
        assert r.json()["finish_reason"] == "length" and len(r.json()["tokens"]) == 3
        assert httpx.get(srv.url + "/stats").json()["used_blocks"] == 0
