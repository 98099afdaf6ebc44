"""Checks for notebook 10 (capstone).

- 10.first_rung (predict -> measure -> explain): the ladder's first rung (HF `generate`'s static
  batches -> the engine's continuous batching) on a workload the notebook did not show, counted in
  forward passes, which do not depend on the machine's speed: how many forward passes HF `generate`
  makes in left-padded batches of 4 (as the capstone benchmark calls it), how many steps the course
  engine takes with 4 slots, and why the engine needs fewer.
"""
from __future__ import annotations

from typing import Any

from course_kit import grading
from course_kit.grading.checks import feedback

RUNG_WORKLOAD = {"prompt_lens": [12, 30, 7, 22, 16, 9, 28, 5], "new_tokens": [3, 40, 6, 33, 2, 38, 5, 30],
                 "batch": 4, "options": {"policy": "continuous", "max_num_seqs": 4, "max_num_batched_tokens": 64}}

# The reasons offered in the notebook (which one is right only instructor/hidden_checks/nb10.py knows).
RUNG_CHOICES = {
    "a": "a static batch runs until its longest request is done, so the slots of finished requests "
         "compute padding and the next requests wait for the whole batch to end",
    "b": "the paged KV cache makes each forward pass of the engine cheaper",
    "c": "the engine's prefix cache skips the prompts' forward passes",
    "d": "HF generate recomputes the whole sequence at every step, without a KV cache",
}


def rung_prompts(vocab_size: int) -> list[list[int]]:
    """The workload's prompts, as the notebook's exercise cell builds them."""
    import torch
    g = torch.Generator().manual_seed(10)
    return [torch.randint(1, vocab_size, (n,), generator=g).tolist() for n in RUNG_WORKLOAD["prompt_lens"]]


def hf_forwards(new_tokens: list[int] = RUNG_WORKLOAD["new_tokens"], batch: int = RUNG_WORKLOAD["batch"]) -> int:
    """Forward passes of HF generate in static batches of `batch`, each run to its longest output:
    one prefill and (longest - 1) decodes per batch (tests/test_exercises_nb09_10.py counts them with
    a forward hook on HF's model)."""
    return sum(max(new_tokens[s:s + batch]) for s in range(0, len(new_tokens), batch))


def engine_steps() -> int:
    """Steps of the course engine on the workload (the tiny model; the count does not depend on it)."""
    import torch

    from course_kit.engine import Engine, SamplingParams
    from course_kit.models import llama
    threads = torch.get_num_threads()
    torch.set_num_threads(1)        # tiny steps: one thread avoids contention on a shared CPU
    try:
        model = llama.Transformer.from_preset("tiny", seed=0)
        eng = Engine(model, **RUNG_WORKLOAD["options"])
        for p, n in zip(rung_prompts(model.config.vocab_size), RUNG_WORKLOAD["new_tokens"]):
            eng.add_request(p, SamplingParams(max_new_tokens=n, ignore_eos=True))
        steps = 0
        while eng.has_unfinished():
            eng.step()
            steps += 1
    finally:
        torch.set_num_threads(threads)
    return steps


def _int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise grading.Wrong(f"{name}: expected an int, found {feedback.describe(value)}")
    return value


RUNG_HINT = """Count, do not time. HF generate: register a forward hook on the HF model
(hf.register_forward_hook) that adds one to a counter, and call hf_generate_static(hf, prompts,
NEW_TOKENS, 4). The engine: add every request, then call engine.step() until
engine.has_unfinished() is False, counting. For the why: look at what each static batch waits for."""


@grading.exercise("10.first_rung", hint=RUNG_HINT, later="WHY")
def first_rung(predicted, hf, engine, why) -> None:
    """predicted: PREDICTED_ENGINE_STEPS (recorded, not graded); hf: HF_FORWARDS; engine: ENGINE_STEPS;
    why: a letter."""
    _int(predicted, "PREDICTED_ENGINE_STEPS (recorded, not graded)")
    want_hf = hf_forwards()
    if _int(hf, "HF_FORWARDS") != want_hf:
        raise grading.Wrong("HF_FORWARDS: that is not the number of forward passes HF generate makes on this "
                            "workload in batches of 4", expected=want_hf)
    want_engine = engine_steps()
    if _int(engine, "ENGINE_STEPS") != want_engine:
        raise grading.Wrong("ENGINE_STEPS: that is not the number of steps the engine takes on this workload",
                            expected=want_engine)
    feedback.choice(why, "WHY", RUNG_CHOICES)
