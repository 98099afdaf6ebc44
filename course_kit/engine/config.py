"""Every option of the engine in one object, passed whole to the parts that read it (notebook 06).

`Engine(model, EngineConfig(...))` resolves every default that depends on the model or the device
(`EngineConfig.resolved`, the one place they are decided) and hands the same config to
`Scheduler(config, blocks)` and `ModelRunner(model, config)`, as nano-vllm does: a new option is
one field here, read where it is used, rather than one more positional argument threaded through
every constructor. A config is never changed in place: overrides and defaults make a copy.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace

import torch

from ..attention.registry import triton_kernels


@dataclass
class EngineConfig:
    policy: str = "continuous"           # "static" | "dynamic" | "continuous"
    block_size: int = 16
    num_blocks: int | None = None        # default: room for max_num_seqs full-length requests
    max_num_seqs: int = 16               # batch slots
    max_num_batched_tokens: int = 512    # continuous: new tokens per step (chunked prefill)
    max_wait_s: float = 0.05             # dynamic: longest a request waits for its batch to fill
    max_model_len: int | None = None     # default: the model's max positions
    prefix_caching: bool = False
    cuda_graphs: bool | None = None      # default: on when the model is on CUDA
    varlen: bool | None = None           # one Triton kernel for mixed steps (default: on CUDA)
    fuse: bool | str | None = None       # compile the blocks around attention (default: on CUDA)
    check_invariants: bool = False       # check the block manager after every step (tests)

    def resolved(self, max_positions: int, device: "torch.device | str" = "cpu") -> "EngineConfig":
        """A copy with every default filled in: `max_model_len` (never more than the model's
        `max_positions`), `num_blocks`, and for the model's `device`: `cuda_graphs` (on a GPU),
        `varlen` and `fuse` (where the course's Triton kernels run, `registry.triton_kernels`).
        Resolving twice changes nothing."""
        if max_positions < 1:
            raise ValueError(f"max_positions must be >= 1, got {max_positions}")
        if self.block_size < 1:
            raise ValueError(f"block_size={self.block_size} must be >= 1")
        on_cuda, triton = torch.device(device).type == "cuda", triton_kernels(device)
        max_len = min(self.max_model_len or max_positions, max_positions)
        blocks_per_seq = -(-max_len // self.block_size)
        return replace(self, max_model_len=max_len,
                       num_blocks=self.num_blocks or self.max_num_seqs * blocks_per_seq,
                       cuda_graphs=on_cuda if self.cuda_graphs is None else self.cuda_graphs,
                       varlen=triton if self.varlen is None else self.varlen,
                       fuse=triton if self.fuse is None else self.fuse)

    def with_options(self, **overrides) -> "EngineConfig":
        """A copy with some options changed (this one is left as it is); an unknown name is an error."""
        names = {f.name for f in fields(self)}
        unknown = sorted(set(overrides) - names)
        if unknown:
            raise ValueError(f"unknown engine option {', '.join(map(repr, unknown))}; choices: {sorted(names)}")
        return replace(self, **overrides)

    @property
    def max_blocks_per_seq(self) -> int:
        """Blocks that one request of `max_model_len` tokens needs (a resolved config only)."""
        if self.max_model_len is None:
            raise ValueError("max_model_len is unset: use EngineConfig.resolved(max_positions) first")
        return -(-self.max_model_len // self.block_size)
