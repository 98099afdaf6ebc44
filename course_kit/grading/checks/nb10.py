"""Checks for notebook 10 (capstone).

- 10.first_rung (predict -> measure -> explain): the ladder's first rung (HF `generate`'s static
  batches -> the engine's continuous batching) on a workload the notebook did not show, counted in
  forward passes, which do not depend on the machine's speed: how many forward passes HF `generate`
  makes in left-padded batches of 4 (as the capstone benchmark calls it), how many steps the course
  engine takes with 4 slots, and why the engine needs fewer. The counts are the instructor's answer
  key (instructor/hidden_checks/nb10.py); this package checks their form.
"""
from __future__ import annotations

from typing import Any

from course_kit import grading
from course_kit.grading.checks import feedback, registry

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


def _int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise grading.Wrong(f"{name}: expected an int, found {feedback.describe(value)}")
    return value


RUNG_HINT = """Count, do not time. HF generate: register a forward hook on the HF model
(hf.register_forward_hook) that adds one to a counter, and call hf_generate_static(hf, prompts,
NEW_TOKENS, 4). The engine: add every request, then call engine.step() until
engine.has_unfinished() is False, counting. For the why: look at what each static batch waits for."""


@grading.exercise("10.first_rung", hint=RUNG_HINT, later="WHY", keyed="HF_FORWARDS and ENGINE_STEPS")
def first_rung(predicted, hf, engine, why) -> None:
    """predicted: PREDICTED_ENGINE_STEPS (recorded, not graded); hf: HF_FORWARDS; engine: ENGINE_STEPS;
    why: a letter."""
    wrong = feedback.Fields()
    for value, name in ((predicted, "PREDICTED_ENGINE_STEPS (recorded, not graded)"), (hf, "HF_FORWARDS"),
                        (engine, "ENGINE_STEPS")):
        with wrong.field():
            _int(value, name)
    with wrong.field():
        feedback.choice(why, "WHY", RUNG_CHOICES)
    wrong.done()
    key = registry.key("10.first_rung")
    if key is None:
        return
    with wrong.field():
        feedback.expect(hf == key["hf_forwards"], "HF_FORWARDS: that is not the number of forward passes HF "
                        "generate makes on this workload in batches of 4", key["hf_forwards"], hf)
    with wrong.field():
        feedback.expect(engine == key["engine_steps"], "ENGINE_STEPS: that is not the number of steps the engine "
                        "takes on this workload", key["engine_steps"], engine)
    wrong.done()
