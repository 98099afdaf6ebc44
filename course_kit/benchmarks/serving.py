"""`course-kit bench serving`: latency against load for the course server and HF's own server.

The workload (seeded): prompt and output lengths drawn from a trace in data/traces/ (chat-like:
short prompts, short answers), greedy, EOS ignored so every request gets exactly the tokens it
asks for. For each server, on 127.0.0.1 only:
1. a warm-up burst (not recorded);
2. a saturation probe: every probe request sent at once; the rate at which the server then
   completes requests is its capacity (req/s), and its token rate its saturated throughput;
3. a short Poisson run at half that capacity (not recorded), then a sweep of Poisson arrival
   rates at fractions of that capacity, each run `duration_s` long (so a rate past capacity
   builds a queue that shows in TTFT), stopped once p99 TTFT passes `stop_ttft_s` or the
   server's `sweep_budget_s` is spent. Measured per rate: TTFT and TPOT p50/p99 (client's clock, TTFT from the
   scheduled send time), throughput, completion; then the rate where p99 TTFT crosses
   `threshold_s` (interpolated; None if it never does).

Servers: `course-kit serve` (the course engine behind FastAPI, notebook 06) and, as the peer,
`transformers serve --continuous-batching` on the same weights: the seeded model written to a temp
folder with `save_pretrained`, with a word-level tokenizer whose word `t<id>` is token `id`, so
both servers get the same token ids. If the peer cannot start, the record keeps its own error.
The ceiling: the course engine's offline throughput (all probe requests at t=0, in-process, no
HTTP) on the same requests.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from .. import bench
from .. import device as _device
from ..engine import Engine, SamplingParams
from ..batching import loadgen
from ..models import llama
from ..batching.server import free_port
from ..batching.client import LoadClient, greedy_tokens, request_body
from ..device import has_cuda
from ..models.hf import model_to_hf

HOST = "127.0.0.1"


def _defaults(size: str, cuda: bool) -> dict:
    common = {"trace": "chat_bursty", "seed": 0, "threshold_s": 1.0, "stop_ttft_s": 3.0, "peer": True}
    if cuda and size in ("full", "small_gpu"):
        # about 4 minutes on an H200: each server's sweep is bounded by sweep_budget_s
        return {**common, "preset": "smollm-135m", "fractions": [0.25, 0.5, 0.75, 0.9, 1.0, 1.1, 1.25],
                "duration_s": 5.0, "min_requests": 48, "max_requests": 3000, "probe_requests": 256,
                "warmup_requests": 16, "warmup_s": 2.0, "check_requests": 4, "max_num_seqs": 64, "block_size": 16,
                "max_num_batched_tokens": 2048, "workers": 4, "timeout_s": 120.0, "startup_timeout_s": 300.0,
                "sweep_budget_s": 75.0}
    # CPU and smoke: the tiny model, a handful of requests per rate, seconds per server
    return {**common, "preset": "tiny", "fractions": [0.3, 0.8, 1.5], "duration_s": 1.0, "min_requests": 6,
            "max_requests": 24, "probe_requests": 12, "warmup_requests": 2, "warmup_s": 0.0, "check_requests": 2, "max_num_seqs": 4,
            "block_size": 16, "max_num_batched_tokens": 64, "workers": 1, "timeout_s": 60.0,
            "startup_timeout_s": 120.0, "sweep_budget_s": 60.0}


def _dtype_name(value) -> str:
    if isinstance(value, torch.dtype):
        return str(value).replace("torch.", "")
    names = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
    value = str(value).replace("torch.", "")
    return names.get(value, value)


# ---------------------------------------------------------------------------- server processes

class ServerProcess:
    """A server in a child process on 127.0.0.1, its output in a log file; stopped by its pid."""

    def __init__(self, name: str, argv: list[str], port: int, workdir: Path, env: dict | None = None) -> None:
        self.name, self.argv, self.port = name, argv, port
        self.log_path = workdir / f"{name.replace(' ', '_')}.log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, cwd=workdir,
                                     env={**os.environ, **(env or {})}, start_new_session=True)

    def log_tail(self, chars: int = 4000) -> str:
        self._log.flush()
        return self.log_path.read_bytes()[-chars:].decode(errors="replace")

    def reason(self) -> str:
        """The server's own error: the last line of its log naming an error, else its last line."""
        lines = [ln.strip() for ln in self.log_tail(6000).splitlines() if ln.strip()]
        named = [ln for ln in lines if "Error" in ln or "error:" in ln.lower()]
        return (named or lines or [f"exited with code {self.proc.poll()}"])[-1][:500]

    def wait_ready(self, timeout_s: float) -> None:
        import httpx
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with code {self.proc.returncode}: {self.reason()}")
            try:
                if httpx.get(f"http://{HOST}:{self.port}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"{self.name} did not answer /health within {timeout_s} s: {self.reason()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)
        self._log.close()


def course_server_argv(p: dict, dev: str, dtype: str, port: int) -> list[str]:
    return [sys.executable, "-m", "course_kit", "serve", "--preset", p["preset"], "--seed", str(p["seed"]),
            "--device", dev, "--dtype", dtype, "--host", HOST, "--port", str(port), "--policy", "continuous",
            "--max-num-seqs", str(p["max_num_seqs"]), "--max-num-batched-tokens", str(p["max_num_batched_tokens"]),
            "--block-size", str(p["block_size"]), "--log-level", "warning"]


def write_peer_model(model: llama.Transformer, folder: Path) -> Path:
    """The model as an HF folder `transformers serve` can load offline: weights, a generation
    config without EOS (every request runs to its length), and a word-level tokenizer in which the
    word `t<id>` is token `id` (no special tokens), so text prompts carry exact token ids."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    hf = model_to_hf(model)
    for cfg in (hf.config, hf.generation_config):
        cfg.eos_token_id = cfg.bos_token_id = cfg.pad_token_id = None
    hf.save_pretrained(folder)
    vocab = model.config.vocab_size
    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocab)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece()           # joins words with spaces
    PreTrainedTokenizerFast(tokenizer_object=tok).save_pretrained(folder)
    return folder


def peer_argv(folder: Path, dev: str, dtype: str, port: int) -> list[str]:
    cli = Path(sys.executable).with_name("transformers")
    head = [str(cli)] if cli.exists() else [sys.executable, "-c",
                                             "from transformers.cli.transformers import main; main()"]
    return head + ["serve", str(folder), "--continuous-batching", "--host", HOST, "--port", str(port),
                   "--device", "cuda:0" if dev == "cuda" else "cpu", "--dtype", dtype, "--log-level", "warning"]


# ---------------------------------------------------------------------------- one server's sweep

def _items(plan: list[loadgen.Planned], dialect: str, vocab: int, seed: int) -> list[tuple[float, bytes, int]]:
    rng = np.random.default_rng(seed)
    return [(r.send_at, request_body(dialect, rng.integers(3, vocab, size=r.prompt_len).tolist(), r.output_len),
             r.output_len) for r in plan]


def sweep(client: LoadClient, dialect: str, lengths: list, vocab: int, p: dict, progress=None) -> dict:
    """Warm-up, saturation probe, then the rate sweep against one running server."""
    warm = client.run(_items(loadgen.schedule(p["warmup_requests"], float("inf"), lengths, p["seed"] + 99),
                             dialect, vocab, p["seed"] + 99), p["timeout_s"])
    bad = [t.error or f"{t.tokens} of {t.expected} tokens" for t in warm if not t.ok]
    if bad:
        raise RuntimeError(f"warm-up requests failed: {bad[0]}")
    probe_plan = loadgen.schedule(p["probe_requests"], float("inf"), lengths, p["seed"])
    probe = loadgen.summarize_rate(client.run(_items(probe_plan, dialect, vocab, p["seed"]), p["timeout_s"]),
                                   float("inf"))
    capacity = probe["completed_rps"]
    if not capacity > 0:
        raise RuntimeError(f"the saturation probe completed nothing: {probe['first_error']}")
    if p["warmup_s"] > 0:
        # a short Poisson run at half capacity, not recorded: step shapes the bursts did not make
        # (and whatever they compile) come before the sweep, not inside it
        n = loadgen.requests_for(capacity / 2, p["warmup_s"], p["warmup_requests"], p["max_requests"])
        client.run(_items(loadgen.schedule(n, capacity / 2, lengths, p["seed"] + 98), dialect, vocab, p["seed"] + 98),
                   p["timeout_s"])
    rows, t_start, cut = [], time.perf_counter(), False
    for i, frac in enumerate(p["fractions"]):
        if time.perf_counter() - t_start > p["sweep_budget_s"]:
            cut = True                                      # a slow server: keep the run's length bounded
            break
        rate = frac * capacity
        n = loadgen.requests_for(rate, p["duration_s"], p["min_requests"], p["max_requests"])
        plan = loadgen.schedule(n, rate, lengths, p["seed"] + 1 + i)
        row = {"fraction_of_capacity": frac,
               **loadgen.summarize_rate(client.run(_items(plan, dialect, vocab, p["seed"] + 1 + i), p["timeout_s"]),
                                        rate)}
        rows.append(row)
        if progress:
            progress(row)
        if not row["ttft_p99_s"] <= p["stop_ttft_s"]:      # past the knee (or failing): enough
            break
    rates = [r["rate_rps"] for r in rows]
    knee = loadgen.crossing(rates, [r["ttft_p99_s"] for r in rows], p["threshold_s"])
    return {"probe": probe, "capacity_rps": capacity, "saturated_tok_s": probe["throughput_tok_s"], "rates": rows,
            "knee_rps": knee, "top_rate_rps": rates[-1], "sweep_cut_by_budget": cut,
            "explain": loadgen.explain_knee(knee, rates[-1], capacity, p["threshold_s"])}


def agreement(port: int, dialect: str, check: list[tuple[list[int], list[int]]]) -> float:
    """The share of the offline engine's greedy tokens (`check`: prompt, tokens) that the server
    produces at the same positions: 1.0 when both do exactly the same work."""
    same = total = 0
    for prompt, ref in check:
        got = greedy_tokens(port, dialect, prompt, len(ref))
        same += sum(a == b for a, b in zip(got, ref))
        total += len(ref)
    return same / total if total else float("nan")


def _serve_and_sweep(name: str, argv: list[str], port: int, dialect: str, workdir: Path, lengths, vocab, p,
                     env: dict | None = None, check: list | None = None) -> dict:
    srv = ServerProcess(name, argv, port, workdir, env)
    try:
        srv.wait_ready(p["startup_timeout_s"])
        same = agreement(port, dialect, check) if check else None
        with LoadClient(port, dialect, workers=p["workers"]) as client:
            out = sweep(client, dialect, lengths, vocab, p,
                        progress=lambda r: print(f"  {name}: {r['rate_rps']:.3g} req/s  p99 TTFT "
                                                 f"{r['ttft_p99_s']:.3g} s  {r['throughput_tok_s']:.4g} tok/s",
                                                 flush=True))
        out["argv"] = argv[1:]
        out["token_agreement_with_offline_engine"] = same
        return out
    except Exception as err:  # noqa: BLE001 - the record keeps why, and the other server's results
        return {"skipped": f"{type(err).__name__}: {err}"[:800], "log_tail": srv.log_tail(), "argv": argv[1:]}
    finally:
        srv.stop()


def offline_ceiling(model: llama.Transformer, lengths, p: dict) -> dict:
    """The course engine on the probe's requests, all at t=0, in-process: no HTTP, no client."""
    plan = loadgen.schedule(p["probe_requests"], float("inf"), lengths, p["seed"])
    rng = np.random.default_rng(p["seed"])
    prompts = [rng.integers(3, model.config.vocab_size, size=r.prompt_len).tolist() for r in plan]
    eng = Engine(model, policy="continuous", max_num_seqs=p["max_num_seqs"], block_size=p["block_size"],
                 max_num_batched_tokens=p["max_num_batched_tokens"])
    eng.generate(prompts[:2], SamplingParams(max_new_tokens=4))          # warm-up
    outs = eng.generate(prompts, [SamplingParams(max_new_tokens=r.output_len, ignore_eos=True) for r in plan])
    if [len(o.tokens) for o in outs] != [r.output_len for r in plan]:
        raise AssertionError("offline engine: output lengths differ from the requested ones")
    s = eng.summary(outs)
    check = [(prompts[i], outs[i].tokens) for i in range(min(p["check_requests"], len(plan)))]
    return {"throughput_tok_s": s["throughput_tok_s"], "rps": len(plan) / s["duration_s"],
            "duration_s": s["duration_s"], "requests": len(plan), "check": check}


@bench.topic("serving", help="TTFT/TPOT against Poisson request rate: course server vs transformers serve")
def run(params: dict) -> dict:
    cuda = has_cuda() and str(params.get("device", "cuda")).startswith("cuda")
    p = {**_defaults(params.get("size", "cpu"), cuda),
         **{k: v for k, v in params.items() if k not in ("size", "device", "dtype")}}
    dev = "cuda" if cuda else "cpu"
    dtype = _dtype_name(_device.param_dtype(params))
    if not cuda:
        dtype = "float32"                        # CPU: the engine's kernels and the peer in fp32
    p["dtype"] = dtype
    lengths = loadgen.trace_lengths(p["trace"])
    tdtype = getattr(torch, dtype)
    model = llama.Transformer.from_preset(p["preset"], seed=p["seed"], dtype=tdtype, device=dev)
    vocab = model.config.vocab_size
    ceiling = offline_ceiling(model, lengths, p)
    mean_out = float(np.mean([o for _, o in lengths]))
    workdir = Path(tempfile.mkdtemp(prefix="course_kit_serving_"))
    try:
        peer_folder = None
        if p["peer"]:
            peer_folder = write_peer_model(model.float().cpu() if cuda else model, workdir / "peer_model")
        del model
        if cuda:
            torch.cuda.empty_cache()
        port = free_port(HOST)
        servers = {"course": _serve_and_sweep("course-kit serve", course_server_argv(p, dev, dtype, port), port,
                                              "course", workdir, lengths, vocab, p,
                                              check=ceiling["check"])}
        if p["peer"]:
            port = free_port(HOST)
            servers["transformers serve"] = _serve_and_sweep(
                "transformers serve", peer_argv(peer_folder, dev, dtype, port), port, "openai", workdir, lengths,
                vocab, p, env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_UPDATE_CHECK": "1",
                               "HF_HUB_DISABLE_TELEMETRY": "1"}, check=ceiling["check"])
        else:
            servers["transformers serve"] = {"skipped": "peer=False in the parameters"}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    results = []
    for name, s in servers.items():
        if "skipped" in s:
            results.append({"server": name, "skipped": s["skipped"]})
            continue
        results.append({"server": name, "kind": "saturation probe", **s["probe"]})
        results += [{"server": name, "kind": "poisson", **r} for r in s["rates"]]
    course, peer = servers["course"], servers["transformers serve"]

    def ratio(key):
        a, b = course.get(key), peer.get(key)
        return a / b if a and b else None
    summary = {
        "threshold_s": p["threshold_s"],
        "mean_output_tokens": mean_out,
        "mean_prompt_tokens": float(np.mean([q for q, _ in lengths])),
        "offline_ceiling_tok_s": ceiling["throughput_tok_s"],
        "offline_ceiling_rps": ceiling["rps"],
        "token_agreement_with_offline_engine": {k: v.get("token_agreement_with_offline_engine")
                                                for k, v in servers.items()},
        "servers": {k: {kk: vv for kk, vv in v.items() if kk not in ("rates", "probe")} for k, v in servers.items()},
        "knee_rps": course.get("knee_rps"),
        "peer_knee_rps": peer.get("knee_rps"),
        "course_vs_peer_capacity": ratio("capacity_rps"),
        "course_vs_peer_saturated_tok_s": ratio("saturated_tok_s"),
        "served_vs_offline_ceiling": (course["saturated_tok_s"] / ceiling["throughput_tok_s"]
                                      if "saturated_tok_s" in course else None),
        "notes": [
            "TTFT counts from each request's scheduled send time (open loop); TPOT = (last - first token) / "
            "(tokens - 1) per request; p50/p99 over the requests that completed with all their tokens",
            "capacity_rps: requests completed per second when every probe request is sent at once; the sweep's "
            "rates are fractions of each server's own capacity",
            f"each server's sweep stops once p99 TTFT passes {p['stop_ttft_s']} s or after {p['sweep_budget_s']} s; "
            f"each rate runs {p['duration_s']} s of arrivals: past capacity the queue grows by (rate - capacity) "
            "x time, so how far past the knee TTFT goes depends on that length",
            "the peer is transformers serve with continuous batching and its default settings, on the same "
            "weights; prompts are the same token ids (its tokenizer maps the word t<id> to id)",
        ],
    }
    return {"params": p, "results": results, "summary": summary}
