"""The thin notebook layer: OOM becomes a clear skip, GPU-only sections show the reference."""
import pytest
import torch

from course_kit import notebook


def test_oom_message_says_what_to_do():
    msg = notebook.oom_message(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB"))
    assert "Skipped" in msg and "80.00 GiB" in msg and "parameters" in msg


def test_oom_handler_is_installed_in_an_ipython_shell():
    from IPython.core.interactiveshell import InteractiveShell
    shell = InteractiveShell.instance()
    try:
        assert notebook.install_oom_handler()
        result = shell.run_cell("import torch\nraise torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 1 GiB')")
        assert result.error_in_exec is None or isinstance(result.error_in_exec, torch.OutOfMemoryError)
        assert shell.CustomTB is not None and torch.OutOfMemoryError in shell.custom_exceptions
    finally:
        InteractiveShell.clear_instance()


def test_gpu_only_shows_the_reference_on_a_cpu(capsys):
    if torch.cuda.is_available():
        assert notebook.gpu_only("roofline") is None
    else:
        record = notebook.gpu_only("roofline")
        assert record is not None and record["environment"]["gpu"]


def _fake_records(tmp_path, monkeypatch, slugs):
    import json
    for slug in slugs:
        (tmp_path / "reference" / slug).mkdir(parents=True)
        (tmp_path / "reference" / slug / "amp.json").write_text(json.dumps(
            {"summary": {"from": slug}, "environment": {"gpu": slug.upper()}}))
    monkeypatch.setenv("COURSE_KIT_DATA", str(tmp_path))


def test_record_on_a_cpu_is_the_reference_under_the_banner(tmp_path, monkeypatch, capsys):
    _fake_records(tmp_path, monkeypatch, ["h200", "t4"])
    monkeypatch.setattr(notebook, "has_gpu", lambda: False)
    shown = []
    monkeypatch.setattr(notebook, "banner", lambda text, kind="info": shown.append((kind, text)))
    assert notebook.record("amp")["summary"]["from"] == "h200"
    assert shown and shown[0][0] == "gpu" and "not this machine" in shown[0][1]
    assert notebook.record("amp", "t4")["summary"]["from"] == "t4"          # an explicit machine
    shown.clear()
    assert notebook.record("missing_topic") is None and "no reference record" in shown[0][1]
    shown.clear()
    notebook.record("amp", quiet=True)
    assert shown == []


def test_record_on_a_gpu_prefers_its_own_then_labels_the_reference(tmp_path, monkeypatch):
    from course_kit import reference
    _fake_records(tmp_path, monkeypatch, ["h200", "t4"])
    monkeypatch.setattr(notebook, "has_gpu", lambda: True)
    shown = []
    monkeypatch.setattr(notebook, "banner", lambda text, kind="info": shown.append((kind, text)))
    monkeypatch.setattr(reference, "gpu_slug", lambda: "t4")
    assert notebook.record("amp")["summary"]["from"] == "t4"
    monkeypatch.setattr(reference, "gpu_slug", lambda: "a100")          # no record of its own
    shown.clear()
    assert notebook.record("amp")["summary"]["from"] == "h200"
    assert shown[0][0] == "warning" and "not this one" in shown[0][1] and "course-kit bench amp" in shown[0][1]
    from course_kit import benchmarks
    monkeypatch.setattr(benchmarks, "run_topic", lambda topic, params: {"summary": {"from": "live"}})
    assert notebook.record("amp", live=True)["summary"]["from"] == "live"
    # no record anywhere: None, with a warning that says so (02's fp8 section on the H200 printed nothing)
    shown.clear()
    assert notebook.record("fp8_train") is None
    assert shown[0][0] == "warning" and "No record of <code>fp8_train</code>" in shown[0][1]
    assert "course-kit bench fp8_train" in shown[0][1]


def test_record_runs_no_live_bench_under_emulation(tmp_path, monkeypatch):
    """An emulated T4's live speeds would be the H200's: the reference record is shown instead."""
    from course_kit import benchmarks, device, reference
    _fake_records(tmp_path, monkeypatch, ["h200"])
    monkeypatch.setattr(notebook, "has_gpu", lambda: True)
    monkeypatch.setattr(notebook, "banner", lambda text, kind="info": None)
    monkeypatch.setattr(reference, "gpu_slug", lambda: "t4-emulated")
    monkeypatch.setattr(device, "emulation", lambda: object())
    monkeypatch.setattr(benchmarks, "run_topic", lambda topic, params: pytest.fail("ran a live bench under emulation"))
    assert notebook.record("amp", live=True)["summary"]["from"] == "h200"


def test_a_headline_far_from_its_record_must_be_named_as_this_runs():
    from course_kit import notebook
    far = notebook.headline("bf16 TFLOP/s", 615.0, 794.0, "TFLOP/s")
    near = notebook.headline("copy GB/s", 4100.0, 4261.7, "GB/s")
    assert "in this run" in far.text and "in this run" not in near.text

    def executed(text, heads):
        meta = {notebook.HEADLINES_KEY: [dict(vars(h), text=h.text) for h in heads]}
        return {"cells": [{"outputs": [{"data": {"text/markdown": text}, "metadata": meta}]}]}
    assert notebook.headline_problems(executed(f"bf16 ran {far.text}.", [far, near])) == []
    # the same figure printed bare (as a contended run once printed it) is caught
    bad = notebook.headline_problems(executed("bf16 ran 615.0 TFLOP/s.", [far]))
    assert len(bad) == 1 and "23% off the record" in bad[0]
