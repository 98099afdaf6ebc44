"""An async completion server around the engine: `course-kit serve`.

    POST /v1/completions   {"prompt": [token ids], "max_tokens": 16, "temperature": 0, "stream": true}
    GET  /health           {"ok": true}
    GET  /stats            running / waiting requests and KV blocks in use

One asyncio task owns the engine. Each iteration it applies the adds and aborts that arrived
since the last step (on the event loop, so nothing races with the step), then runs one engine
step in a worker thread (the model call would otherwise block every connection) and hands each
new token to its request's queue. A streaming response sends the tokens as server-sent events;
if the client goes away, the response is cancelled and its request aborted, freeing its blocks.

Prompts are token ids: the course's models are built from seeded random weights, with no
tokenizer to download.

No request body gets a 5xx: every number is checked (non-finite floats are refused, as are
sampling settings the sampler cannot run, which would otherwise fail the whole batch's step),
validation errors are made JSON-safe before they are sent (a NaN or a lone surrogate in an error
would otherwise break the encoder), and bodies are capped in size (413) and in upload time (408).
`tests/test_serve_fuzz.py` throws random bodies at it.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import socket
import threading
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from ..engine import Engine, EngineConfig, SamplingParams
from .guard import BODY_TIMEOUT_S, MAX_BODY_BYTES, BodyLimit, json_safe

try:
    from fastapi import FastAPI, HTTPException, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, StreamingResponse
    from pydantic import BaseModel, Field
except ImportError:  # pragma: no cover - fastapi is a dependency; keep `course-kit` importable
    FastAPI = None

# below this (but above 0, which is greedy) logits / temperature overflow to inf and sampling fails
MIN_TEMPERATURE = 1e-2
MAX_TEMPERATURE = 100.0

if FastAPI is not None:
    class CompletionRequest(BaseModel):
        prompt: list[int] = Field(..., description="prompt token ids")
        max_tokens: int = Field(16, ge=1, description="new tokens to generate")
        temperature: float = Field(0.0, ge=0.0, le=MAX_TEMPERATURE, allow_inf_nan=False,
                                   description=f"0 (greedy) or {MIN_TEMPERATURE}..{MAX_TEMPERATURE}")
        top_k: int = Field(0, ge=0, description="0 (off) up to the vocabulary size")
        top_p: float = Field(1.0, gt=0.0, le=1.0, allow_inf_nan=False)
        seed: int | None = Field(None, ge=0, lt=2**63)
        ignore_eos: bool = False
        stream: bool = True


@dataclass
class _Pending:
    queue: asyncio.Queue
    done: bool = False
    tokens: list[int] = field(default_factory=list)


class EngineLoop:
    """The background task that owns the engine (see the module docstring)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.requests: dict[str, _Pending] = {}
        self._adds: list[tuple[str, list[int], SamplingParams]] = []
        self._aborts: list[str] = []
        self._wake = asyncio.Event()
        self._ids = 0
        self._task: asyncio.Task | None = None
        self.steps = 0
        self.last_error: str | None = None

    def submit(self, prompt: list[int], params: SamplingParams) -> tuple[str, asyncio.Queue]:
        """Validate now (so the client gets a 400), add at the next step."""
        eng = self.engine
        vocab = eng.model.config.vocab_size
        if not prompt:
            raise ValueError("prompt is empty: give at least one token id")
        if 0 < params.temperature < MIN_TEMPERATURE:
            raise ValueError(f"temperature={params.temperature} is in (0, {MIN_TEMPERATURE}): use 0 for "
                             f"greedy or a value in [{MIN_TEMPERATURE}, {MAX_TEMPERATURE}]")
        if params.top_k > vocab:
            raise ValueError(f"top_k={params.top_k} exceeds the vocabulary ({vocab}); use 0..{vocab}")
        bad = [t for t in prompt if not 0 <= t < vocab]
        if bad:
            raise ValueError(f"token ids {json_safe(bad[:5])} are outside [0, {vocab}) (the model's vocabulary)")
        limit = eng.scheduler.capacity()
        if len(prompt) + params.max_new_tokens > limit:
            raise ValueError(f"prompt {len(prompt)} + max_tokens {params.max_new_tokens} = "
                             f"{len(prompt) + params.max_new_tokens} tokens; the server holds at most {limit}")
        self._ids += 1
        rid = f"cmpl-{self._ids}"
        pending = _Pending(asyncio.Queue())
        self.requests[rid] = pending
        self._adds.append((rid, prompt, params))
        self._wake.set()
        return rid, pending.queue

    def cancel(self, rid: str) -> None:
        pending = self.requests.get(rid)
        if pending is not None and not pending.done:
            self._aborts.append(rid)
            self._wake.set()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    def _apply(self) -> None:
        adds, self._adds = self._adds, []
        for rid, prompt, params in adds:
            try:
                self.engine.add_request(prompt, params, request_id=rid)
            except Exception as err:  # noqa: BLE001 - fail this request alone, keep the loop alive
                self._close(rid, f"error: {type(err).__name__}: {err}")
        for rid in self._aborts:
            self.engine.abort(rid)
            self._close(rid, "abort")
        self._aborts.clear()

    def _close(self, rid: str, reason: str | None) -> None:
        pending = self.requests.pop(rid, None)
        if pending is not None and not pending.done:
            pending.done = True
            pending.queue.put_nowait(("done", reason))

    async def _run(self) -> None:
        eng = self.engine
        dynamic = eng.config.policy == "dynamic"
        while True:
            self._apply()
            if not eng.has_unfinished():
                self._wake.clear()
                await self._wake.wait()
                continue
            # dynamic batching waits (up to max_wait_s) for more requests; static and continuous
            # start with whatever is waiting
            try:
                produced = await asyncio.to_thread(eng.step, dynamic)
            except Exception as err:  # noqa: BLE001 - fail the open requests, keep serving
                self.last_error = f"{type(err).__name__}: {err}"
                for rid in list(self.requests):
                    eng.abort(rid)
                    self._close(rid, f"error: {self.last_error}")
                continue
            self.steps += 1
            for seq, token in produced:
                pending = self.requests.get(seq.request_id)
                if pending is None:
                    continue
                pending.tokens.append(token)
                pending.queue.put_nowait(("token", token))
                if seq.finished:
                    self._close(seq.request_id, seq.finish_reason)
            if not eng.last_step_ran:
                await asyncio.sleep(eng.config.max_wait_s / 4)

    def stats(self) -> dict:
        eng = self.engine
        return {"policy": eng.config.policy, "running": len(eng.scheduler.running),
                "waiting": len(eng.scheduler.waiting), "open_requests": len(self.requests),
                "used_blocks": eng.blocks.num_used_blocks, "free_blocks": eng.blocks.num_free_blocks,
                "num_blocks": eng.blocks.num_blocks, "steps": self.steps,
                "preemptions": eng.scheduler.num_preemptions, "last_error": self.last_error}


def create_app(engine: Engine, max_body_bytes: int = MAX_BODY_BYTES,
               body_timeout_s: float = BODY_TIMEOUT_S) -> "FastAPI":
    """The FastAPI app serving `engine` (its loop starts with the app's lifespan); bodies larger
    than `max_body_bytes` get 413, bodies slower than `body_timeout_s` to arrive get 408."""
    if FastAPI is None:
        raise RuntimeError("serving needs fastapi: pip install fastapi uvicorn")

    @asynccontextmanager
    async def lifespan(app):
        app.state.loop = EngineLoop(engine)
        app.state.loop.start()
        yield
        await app.state.loop.stop()

    app = FastAPI(title="course_kit engine", lifespan=lifespan)
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes, timeout_s=body_timeout_s)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError):
        return JSONResponse(status_code=422, content={"detail": json_safe(exc.errors())})

    @app.get("/health")
    async def health():
        return {"ok": True}

    @app.get("/stats")
    async def stats():
        return app.state.loop.stats()

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest, request: Request):
        loop: EngineLoop = app.state.loop
        try:
            params = SamplingParams(max_new_tokens=req.max_tokens, temperature=req.temperature,
                                    top_k=req.top_k, top_p=req.top_p, seed=req.seed,
                                    ignore_eos=req.ignore_eos)
            rid, queue = loop.submit(req.prompt, params)
        except ValueError as err:
            raise HTTPException(status_code=400, detail=str(err))
        t0 = time.perf_counter()
        if req.stream:
            return StreamingResponse(_sse(loop, rid, queue, t0), media_type="text/event-stream")
        tokens, reason, ttft = [], None, None
        try:
            while True:
                kind, value = await queue.get()
                if kind == "done":
                    reason = value
                    break
                ttft = ttft if ttft is not None else time.perf_counter() - t0
                tokens.append(value)
        finally:
            if reason is None:            # the client went away: free the request's blocks
                loop.cancel(rid)
        return JSONResponse({"id": rid, "tokens": tokens, "finish_reason": reason, "ttft_s": ttft,
                             "latency_s": time.perf_counter() - t0,
                             "usage": {"prompt_tokens": len(req.prompt), "completion_tokens": len(tokens)}})

    return app


async def _sse(loop: EngineLoop, rid: str, queue: asyncio.Queue, t0: float):
    """Server-sent events: one `data:` line per token, then a summary and [DONE]."""
    tokens, reason = [], None
    try:
        while True:
            kind, value = await queue.get()
            if kind == "done":
                reason = value
                break
            tokens.append(value)
            yield f"data: {json.dumps({'id': rid, 'index': len(tokens) - 1, 'token': value})}\n\n"
        yield ("data: " + json.dumps({"id": rid, "done": True, "finish_reason": reason, "tokens": tokens,
                                      "latency_s": time.perf_counter() - t0}) + "\n\n")
        yield "data: [DONE]\n\n"
    finally:
        if reason is None:                # cancelled by a disconnect: free the request's blocks
            loop.cancel(rid)


# ---------------------------------------------------------------------------- running a server

def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class BackgroundServer:
    """uvicorn in a daemon thread (notebooks and tests): `with BackgroundServer(engine) as srv:`."""

    def __init__(self, engine: Engine, host: str = "127.0.0.1", port: int | None = None,
                 **app_options) -> None:
        import uvicorn
        self.host, self.port = host, port or free_port(host)
        self.app = create_app(engine, **app_options)
        config = uvicorn.Config(self.app, host=self.host, port=self.port, log_level="warning",
                                lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> "BackgroundServer":
        self.thread.start()
        deadline = time.time() + timeout
        while not self.server.started:
            if time.time() > deadline or not self.thread.is_alive():
                raise RuntimeError(f"the server did not start on {self.url} within {timeout} s")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)

    def __enter__(self) -> "BackgroundServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def build_engine(preset: str = "tiny", checkpoint: str | None = None, device: str | None = None,
                 dtype: str | None = None, seed: int = 0, **engine_options) -> Engine:
    """A model (preset with seeded weights, or a local checkpoint) inside an engine."""
    import torch

    from ..device import compute_dtype, default_device, dtype_name
    from ..models import llama
    from ..models.hf import model_from_pretrained
    device = device or default_device()
    dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    dtype = dtype or dtype_name(compute_dtype() if device.startswith("cuda") else torch.float32)
    if dtype not in dtypes:
        raise ValueError(f"dtype={dtype!r}; choose one of {sorted(dtypes)}")
    if checkpoint:
        model = model_from_pretrained(checkpoint, dtype=dtypes[dtype], device=device)
    else:
        model = llama.Transformer.from_preset(preset, seed=seed, dtype=dtypes[dtype], device=device)
    return Engine(model, EngineConfig(**engine_options))


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `course-kit serve` (called by course_kit.cli)."""
    p = subparsers.add_parser("serve", help="serve the course model over HTTP (SSE streaming completions)")
    p.add_argument("--preset", default="tiny", help="model preset (seeded random weights), e.g. tiny, smollm-135m")
    p.add_argument("--checkpoint", help="a local safetensors folder instead of a preset")
    p.add_argument("--policy", default="continuous", choices=["static", "dynamic", "continuous"])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    p.add_argument("--dtype", help="float32, bfloat16 or float16")
    p.add_argument("--max-num-seqs", type=int, default=16)
    p.add_argument("--max-num-batched-tokens", type=int, default=512)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--num-blocks", type=int)
    p.add_argument("--max-body-bytes", type=int, default=MAX_BODY_BYTES,
                   help="larger request bodies get 413")
    p.add_argument("--seed", type=int, default=0, help="seed of the preset's random weights")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"],
                   help="uvicorn's log level (info logs every request)")
    p.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    import uvicorn
    engine = build_engine(args.preset, args.checkpoint, args.device, args.dtype, seed=args.seed, policy=args.policy,
                          max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens,
                          block_size=args.block_size, num_blocks=args.num_blocks)
    engine.warmup()
    print(f"course-kit serve: {args.preset if not args.checkpoint else args.checkpoint}, policy "
          f"{args.policy}, on http://{args.host}:{args.port}  (POST /v1/completions)")
    uvicorn.run(create_app(engine, max_body_bytes=args.max_body_bytes), host=args.host, port=args.port,
                log_level=args.log_level)
    return 0
