"""The speculative lesson's words, figures, widget and batch roofline, from numbers (both directions)."""
import pytest

from course_kit.models import llama
from course_kit.plots import speculative as plots
from course_kit.capstone.speculative import at_batch, explain, rules
from course_kit.widgets.speculative import SpeculationExplorer, tokens_html

COSTS = {"target_ms": {1: 0.200, 4: 0.210, 8: 0.230}, "draft_ms": 0.020, "c": 0.1}


def _row(k=4, alpha=0.8, speedup=None, tokens_per_s=None, base=5000.0, tpr=None):
    tpr = rules.expected_tokens(alpha, k) if tpr is None else tpr
    if tokens_per_s is None:
        tokens_per_s = base * (speedup if speedup is not None else rules.predicted_speedup(alpha, k, 0.1))
    return {"k": k, "alpha": alpha, "tokens_per_round": tpr, "tokens_per_s": tokens_per_s,
            "speedup": tokens_per_s / base, "predicted_speedup": rules.predicted_speedup(alpha, k, 0.1),
            "acceptance_per_position": [alpha] * k, "variant": "speculative", "draft": "trained"}


def test_verify_cost_says_one_step_only_when_the_pass_is_flat():
    assert "costs about one step" in explain.explain_verify_cost(COSTS)
    steep = {"target_ms": {1: 1.0, 8: 7.5}, "draft_ms": 0.2, "c": 0.2}
    text = explain.explain_verify_cost(steep, "a CPU run")
    assert "nearly a full step" in text and "about one step" not in text and "7.50x" in text
    middle = {"target_ms": {1: 1.0, 8: 3.0}, "draft_ms": 0.2, "c": 0.2}
    assert "partly amortised" in explain.explain_verify_cost(middle)


def test_speedup_words_follow_measured_against_predicted():
    pred = rules.predicted_speedup(0.8, 4, 0.1)
    short = explain.explain_speedup(_row(speedup=pred * 0.7), 5000.0, COSTS)
    assert "falls short" in short and "faster than" in short and f"{pred:.2f}x" in short
    # the round's time against its steps' time, both computed from the numbers
    took = explain.round_ms(_row(speedup=pred * 0.7))
    assert f"{took:.3f} ms" in short and f"{4 * 0.020 + 0.200:.3f} ms" in short
    assert "close to the prediction" in explain.explain_speedup(_row(speedup=pred), 5000.0, COSTS)
    beats = explain.explain_speedup(_row(speedup=pred * 1.3, tpr=rules.expected_tokens(0.8, 4) * 1.3), 5000.0, COSTS)
    assert "beats the prediction" in beats and "came in runs" in beats
    slow = explain.explain_speedup(_row(alpha=0.05, speedup=0.7), 5000.0, COSTS)
    assert "slower than the main model alone" in slow


def test_best_k_is_compared_with_both_peers_in_either_direction():
    rows = [_row(k=k, speedup=s) for k, s in ((1, 1.3), (4, 2.0), (8, 1.5))]
    text = explain.explain_best(rows, 5000.0, hf_assisted_tokens_per_s=2000.0)
    assert "k = 4" in text and "faster than HF's assisted" in text and "Fewer draft tokens" in text
    assert "slower than HF's assisted" in explain.explain_best(rows, 5000.0, hf_assisted_tokens_per_s=20000.0)
    with pytest.raises(ValueError, match="no speculative rows"):
        explain.explain_best([{"k": 0, "tokens_per_s": 1.0}], 1.0)


def _models():
    target = at_batch.PassModel.of(llama.ModelConfig.from_preset("llama-1b"))
    draft = at_batch.PassModel.of(llama.ModelConfig.from_preset("smollm-135m"))
    return target, draft


def test_batch_roofline_verify_is_one_step_at_batch_1_and_k_plus_1_steps_past_the_ridge():
    target, draft = _models()
    gbs, tflops = 4262.0, 794.0           # the H200's measured copy bandwidth and bf16 matmul
    ridge = at_batch.ridge_tokens(2.0, gbs, tflops)
    assert 150 < ridge < 250
    pts = at_batch.curve(0.8, 4, [1, 2, 8, 32, 128, 512], target, draft, context=64, gbs=gbs, tflops=tflops)
    assert pts[0]["verify_over_step"] == pytest.approx(1.0, abs=0.01)
    assert pts[-1]["verify_over_step"] == pytest.approx(5.0, rel=0.05)
    # at batch 1 it is Leviathan's formula with c = the draft's bytes over the target's
    c = pts[0]["draft_s"] / pts[0]["step_s"]
    assert pts[0]["speedup"] == pytest.approx(rules.predicted_speedup(0.8, 4, c), rel=1e-6)
    assert pts[0]["speedup"] > 2 and pts[-1]["speedup"] < 1
    b = at_batch.break_even_batch(pts)
    text = explain.explain_batch(pts, ridge)
    assert b is not None and f"From batch {b} on, speculation no longer pays" in text
    assert "From batch 128 on, a verify pass carries more than the ridge" in text     # 128 x 5 > ridge > 32 x 5
    small = at_batch.curve(0.8, 4, [1, 2, 4], target, draft, context=512, gbs=gbs, tflops=tflops)
    text = explain.explain_batch(small, ridge)
    assert "still pays at every batch" in text and "No verify pass shown reaches" in text
    # past the ridge, yet still paying: long contexts make the plain step read K/V, not weights
    kv_bound = at_batch.curve(1.0, 4, [1, 64, 256], target, draft, context=512, gbs=gbs, tflops=tflops)
    text = explain.explain_batch(kv_bound, ridge)
    assert "still pays" in text and "more than the ridge" in text


def test_figures_and_the_explorer_redraw_from_a_record():
    record = {"results": [_row(k=k, speedup=1 + 0.2 * k) for k in range(1, 9)]
              + [{**_row(k=2, alpha=0.01, speedup=0.8), "draft": "random"}],
              "summary": {"target_alone_tokens_per_s": 5000.0, "step_costs": COSTS}}
    fig = plots.speedup_figure(plots.spec_rows(record), title="t", selected_k=3)
    assert list(fig.data[0].x) == list(range(1, 9)) and fig.data[0].marker.color[2] == plots.ORANGE
    assert len(plots.acceptance_figure([0.9, 0.8], title="a", alpha=0.85).data[0].y) == 2
    assert len(plots.verify_cost_figure(COSTS, title="v").data) == 3
    calls = []

    def live(draft, k):
        calls.append((draft, k))
        return {"row": {"alpha": 0.5, "tokens_per_round": 1.8}, "costs": {"c": 0.1}, "predicted_speedup": 1.2,
                "speedup": 1.1, "base_tokens_per_s": 50.0, "same_tokens_as_target": True, "tokens": [1, 2],
                "provenance": ["prefill", "draft"], "pieces": ["a", "<b>"]}
    ex = SpeculationExplorer(record, live=live, live_max_k=4)
    first = ex.text.value
    ex.k.value = 6
    assert ex.text.value != first and "k = 6" in ex.text.value
    assert ex.figures["speedup"].data[0].marker.color[5] == plots.ORANGE
    assert [o[1] for o in ex.draft.options] == ["trained", "random"]
    ex.draft.value = "random"
    assert "no run with k = 6" in ex.text.value
    ex.k.value = 2
    assert "alpha = 0.01" in ex.text.value
    ex.run_live()
    assert calls == [("random", 2)] and "predicted 1.20x" in ex.live_text.value
    assert "&lt;b&gt;" in ex.tokens.value                     # decoded text is escaped
    assert "No speculative record" in SpeculationExplorer(None).text.value


def test_tokens_html_colours_each_token_by_where_it_came_from():
    out = tokens_html(["x", "y", "z"], ["prefill", "draft", "target"])
    assert out.count("<span style=\"background:") == 6          # 3 legend entries, 3 tokens
    assert 'title="draft">y<' in out and 'title="target">z<' in out


def test_a_shortfall_is_charged_to_the_verify_pass_only_when_its_timing_covers_it():
    # the H200 record's shape: a small target whose pass over 3 tokens costs 1.64 steps
    costs = {"target_ms": {"1": 0.165, "2": 0.213, "3": 0.271}, "draft_ms": 0.0173, "c": 0.0173 / 0.165}
    again = rules.predicted_speedup_from_costs(0.738, 2, 0.0173, 0.165, 0.271)
    covered = explain.explain_speedup(_row(k=2, alpha=0.738, speedup=again * 0.98), 5000.0, costs)
    assert "falls short" in covered and f"**{again:.2f}x**" in covered and "account for the gap" in covered
    left = explain.explain_speedup(_row(k=2, alpha=0.738, speedup=again * 0.6), 5000.0, costs)
    assert "still unaccounted for" in left and "account for the gap" not in left
    # no timing of a pass over k + 1 tokens: no such sentence
    assert "was timed at" not in explain.explain_speedup(_row(speedup=0.5), 5000.0, COSTS)
