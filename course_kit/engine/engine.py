"""The engine front: add requests, step, collect outputs with their timings.

One step is four stages, kept apart so that notebook 07 can overlap them (the CPU preparing step
N+1 while the GPU runs step N):

    schedule()  ->  prepare()  ->  execute()  ->  postprocess()
    scheduler       runner         runner         scheduler (+ metrics)

`Engine.generate(prompts, sampling)` runs a whole workload, optionally replaying arrival times
(a trace), and returns one `RequestOutput` per prompt with arrival, first-token and finish times.
"""
from __future__ import annotations

import itertools
import time

import torch

from ..models import llama
from .block_manager import BlockManager
from .config import EngineConfig
from .metrics import RequestOutput, StepRecord, summarize
from .model_runner import ModelRunner, StepInputs
from .scheduler import Scheduler, SchedulerOutput
from .sequence import SamplingParams, Sequence, Status


class Engine:
    def __init__(self, model: llama.Transformer, config: EngineConfig | None = None, **overrides) -> None:
        cfg = (config or EngineConfig()).with_options(**overrides)     # the caller's config stays as it is
        self.config = cfg = cfg.resolved(model.config.max_seq_len, next(model.parameters()).device)
        self.model = model
        self.max_model_len = cfg.max_model_len
        self.blocks = BlockManager(cfg.num_blocks, cfg.block_size, cfg.prefix_caching)
        self.scheduler = Scheduler(cfg, self.blocks)
        self.runner = ModelRunner(model, cfg)
        self.steps: list[StepRecord] = []
        self.sequences: dict[str, Sequence] = {}
        self._ids = itertools.count()
        self._t0 = time.perf_counter()
        self.eos_token_id: int | None = None
        self.last_step_ran = False

    # ---- clock and requests -------------------------------------------------------------
    def now(self) -> float:
        """Seconds since the engine's clock was reset."""
        return time.perf_counter() - self._t0

    def reset_clock(self) -> None:
        self._t0 = time.perf_counter()

    def add_request(self, prompt: list[int], params: SamplingParams | None = None,
                    request_id: str | None = None, arrival: float | None = None) -> Sequence:
        params = params or SamplingParams()
        vocab = self.model.config.vocab_size
        bad = [t for t in prompt if not 0 <= int(t) < vocab]
        if bad:
            raise ValueError(f"token ids {bad[:5]} are outside [0, {vocab}) (the vocabulary)")
        rid = request_id if request_id is not None else f"r{next(self._ids)}"
        if rid in self.sequences and not self.sequences[rid].finished:
            raise ValueError(f"request id {rid!r} is already running")
        seq = Sequence(rid, [int(t) for t in prompt], params,
                       arrival=self.now() if arrival is None else arrival, eos_token_id=self.eos_token_id)
        self.scheduler.add(seq)
        self.sequences[rid] = seq
        return seq

    def abort(self, request_id: str) -> bool:
        """Stop a request now and free its blocks (a client went away)."""
        return self.scheduler.abort(request_id, self.now()) is not None

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    # ---- one step, in four stages -------------------------------------------------------
    def schedule(self, more_coming: bool = False) -> SchedulerOutput:
        return self.scheduler.schedule(self.now(), more_coming)

    def prepare(self, sched: SchedulerOutput) -> StepInputs:
        return self.runner.prepare(sched, self.blocks)

    def execute(self, inputs: StepInputs) -> list[int | None]:
        """The sampled token of each item of `inputs.order` (the runner's row order)."""
        return self.runner.sample(self.runner.run(inputs), inputs)

    def postprocess(self, sched: SchedulerOutput, inputs: StepInputs, tokens: list[int | None],
                    start: float) -> list[tuple[Sequence, int]]:
        now = self.now()
        rows = [(s.seq.slot, s.seq.request_id, "prefill" if s.num_tokens > 1 or not s.sample else "decode")
                for s in inputs.order]
        # the runner lays rows out in its own order (one-token rows first): hand the scheduler
        # each item's token in *its* order, or tokens land on the wrong sequences
        produced = self.scheduler.postprocess(sched, inputs.in_schedule_order(tokens, sched.scheduled), now)
        real = sum(s.num_tokens for s in sched.scheduled)
        self.steps.append(StepRecord(start, now, rows, real, sched.padding_tokens,
                                     self.blocks.num_used_blocks, len(self.scheduler.waiting),
                                     len(sched.preempted), sched.kv_tokens))
        if self.config.check_invariants:
            self.blocks.check_invariants()
        return produced

    def step(self, more_coming: bool = False) -> list[tuple[Sequence, int]]:
        """Run one model step; return the (sequence, new token) pairs it produced."""
        start = self.now()
        sched = self.schedule(more_coming)
        self.last_step_ran = not sched.empty or bool(sched.preempted)
        if sched.empty:
            return []
        inputs = self.prepare(sched)
        tokens = self.execute(inputs)
        return self.postprocess(sched, inputs, tokens, start)

    # ---- whole workloads ----------------------------------------------------------------
    def warmup(self) -> None:
        """Capture CUDA graphs (if on) and compile kernels before anything is timed."""
        self.runner.capture()
        if self.runner.device.type == "cuda":
            torch.cuda.synchronize()

    def generate(self, prompts: list[list[int]], sampling: SamplingParams | list[SamplingParams] | None = None,
                 arrivals: list[float] | None = None, progress: bool = False) -> list[RequestOutput]:
        """Run all prompts to completion. `arrivals` (s from now) replays a trace in real time:
        a request is visible to the scheduler only once its arrival time has passed."""
        params = sampling if isinstance(sampling, list) else [sampling or SamplingParams()] * len(prompts)
        if len(params) != len(prompts):
            raise ValueError(f"{len(params)} sampling params for {len(prompts)} prompts")
        if arrivals is not None and len(arrivals) != len(prompts):
            raise ValueError(f"{len(arrivals)} arrival times for {len(prompts)} prompts")
        if any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        self.warmup()
        self.steps = []
        self.reset_clock()
        order = sorted(range(len(prompts)), key=lambda i: arrivals[i] if arrivals else 0.0)
        seqs: dict[int, Sequence] = {}
        nxt = 0
        bar = None
        if progress:
            from ..bench import progress as _progress
            bar = _progress(None, total=sum(p.max_new_tokens for p in params), desc=f"{self.config.policy}")
        while nxt < len(order) or self.has_unfinished():
            now = self.now()
            while nxt < len(order) and (arrivals is None or arrivals[order[nxt]] <= now):
                i = order[nxt]
                seqs[i] = self.add_request(prompts[i], params[i],
                                           arrival=0.0 if arrivals is None else arrivals[i])
                nxt += 1
            more = nxt < len(order)
            produced = self.step(more_coming=more)
            if bar is not None and produced:
                bar.update(len(produced))
            if not self.last_step_ran:
                if not more:
                    raise RuntimeError("the engine made no progress with no arrivals left (a bug)")
                # idle: sleep until the next arrival, or re-check a dynamic batch's timeout soon
                wait = arrivals[order[nxt]] - self.now()
                if self.config.policy == "dynamic":
                    wait = min(wait, self.config.max_wait_s / 4)
                time.sleep(max(wait, 0.0))
        if bar is not None:
            bar.close()
        return [self.output(seqs[i]) for i in range(len(prompts))]

    @staticmethod
    def output(seq: Sequence) -> RequestOutput:
        return RequestOutput(seq.request_id, seq.prompt, list(seq.output), seq.arrival, seq.first_token_time,
                             seq.finish_time, seq.finish_reason, list(seq.token_times), seq.num_preemptions)

    def summary(self, outputs: list[RequestOutput]) -> dict:
        return summarize(outputs, self.steps, self.config.max_num_seqs)


__all__ = ["Engine", "EngineConfig", "SamplingParams", "Status"]
