"""A request as the engine sees it: its tokens, how many are in the KV cache, and its timestamps."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class SamplingParams:
    """How to pick tokens for one request. temperature 0 is greedy."""
    max_new_tokens: int = 16
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens={self.max_new_tokens} must be >= 1")
        if self.temperature < 0:
            raise ValueError(f"temperature={self.temperature} must be >= 0")
        if self.top_k < 0:
            raise ValueError(f"top_k={self.top_k} must be >= 0 (0 disables it)")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p={self.top_p} must be in (0, 1]")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


class Status(enum.Enum):
    WAITING = "waiting"      # arrived (or preempted), holds no blocks
    RUNNING = "running"      # holds blocks and a batch slot
    FINISHED = "finished"    # done: length, EOS or aborted


@dataclass
class Sequence:
    """One request. `tokens` is prompt + generated; the first `num_computed` have K/V in the cache."""
    request_id: str
    prompt: list[int]
    params: SamplingParams
    arrival: float = 0.0
    eos_token_id: int | None = None
    output: list[int] = field(default_factory=list)
    num_computed: int = 0
    status: Status = Status.WAITING
    slot: int = -1                 # batch slot while running (for the Gantt chart)
    first_token_time: float | None = None
    finish_time: float | None = None
    token_times: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    num_preemptions: int = 0
    generator: torch.Generator | None = None   # made by the model runner on its device

    def __post_init__(self) -> None:
        if len(self.prompt) == 0:
            raise ValueError(f"request {self.request_id!r}: the prompt is empty; give at least one token")

    @property
    def tokens(self) -> list[int]:
        return self.prompt + self.output

    def token_slice(self, start: int, n: int) -> list[int]:
        """tokens[start:start + n] without building the whole list (decode steps read one token)."""
        lp = len(self.prompt)
        if start >= lp:
            return self.output[start - lp:start - lp + n]
        return (self.prompt + self.output)[start:start + n]

    @property
    def num_tokens(self) -> int:
        return len(self.prompt) + len(self.output)

    @property
    def num_uncomputed(self) -> int:
        """Tokens still to run through the model before the next token can be sampled."""
        return self.num_tokens - self.num_computed

    @property
    def in_prefill(self) -> bool:
        return self.num_uncomputed > 1

    @property
    def finished(self) -> bool:
        return self.status is Status.FINISHED

    @property
    def max_total_tokens(self) -> int:
        return len(self.prompt) + self.params.max_new_tokens

    def append(self, token: int, now: float) -> bool:
        """Add a sampled token; return True when the request is now complete."""
        self.output.append(int(token))
        self.token_times.append(now)
        if self.first_token_time is None:
            self.first_token_time = now
        if not self.params.ignore_eos and self.eos_token_id is not None and token == self.eos_token_id:
            self.finish_reason = "eos"
        elif len(self.output) >= self.params.max_new_tokens:
            self.finish_reason = "length"
        return self.finish_reason is not None
