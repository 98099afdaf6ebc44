import json

import pytest

from course_kit import reference


@pytest.mark.parametrize("name, count, slug", [
    ("NVIDIA H200", 1, "h200"), ("NVIDIA H200", 2, "h200x2"), ("Tesla T4", 1, "t4"),
    ("NVIDIA A100-SXM4-80GB", 1, "a100"), ("NVIDIA GeForce RTX 4090", 1, "rtx-4090"), (None, 1, "cpu"),
    ("NVIDIA H100 80GB HBM3", 8, "h100-hbm3x8")])
def test_slugs(name, count, slug):
    assert reference.slug_for(name, count) == slug


def test_save_load_and_list(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_KIT_DATA", str(tmp_path))
    path = reference.save("roofline", {"summary": {"copy_gbs": 1.0}}, slug="h200")
    assert path == tmp_path / "reference" / "h200" / "roofline.json"
    record = reference.load("roofline", "h200")
    assert record["summary"]["copy_gbs"] == 1.0 and "torch" in record["environment"]
    assert reference.load("roofline", "t4") is None
    assert reference.available() == ["h200"] and reference.available("other") == []
    own = {"summary": {}, "environment": {"gpu": None}}
    labels = [label for label, _ in reference.own_and_reference("roofline", own, "h200")]
    assert labels[0].startswith("yours") and labels[1].startswith("reference")


def test_unwritable_folder_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(PermissionError, match="cannot write"):
        reference.save("roofline", {}, folder=blocker / "sub")


def test_bad_topic_name():
    with pytest.raises(ValueError, match="topic"):
        reference.path("../etc")


def test_committed_records_have_environment_stamps():
    for slug in reference.available():
        for p in (reference.root() / slug).glob("*.json"):
            env = json.loads(p.read_text()).get("environment", {})
            for key in ("gpu", "capability", "torch", "triton", "transformers", "date"):
                assert key in env, f"{p} lacks environment[{key!r}]"
