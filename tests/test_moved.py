"""Old import paths (a notebook saved in work/ before the lessons moved into packages) still work,
and give the very module that moved, not a second copy of it."""
import importlib
import sys
import warnings

import pytest

from course_kit import _moved


@pytest.mark.parametrize("old", sorted(_moved.MOVED))
def test_every_old_path_is_the_moved_module(old):
    new = importlib.import_module(_moved.MOVED[old])
    sys.modules.pop(old, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    assert module is new
    assert module.__spec__.name == _moved.MOVED[old]   # its own spec, not the old name's
    assert any(f"moved to {_moved.MOVED[old]}" in str(w.message) for w in caught)


def test_a_submodule_of_a_moved_package_is_not_loaded_twice():
    from course_kit.cuda_graphs.decode_kernels import argmax
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        old = importlib.import_module("course_kit.decode_kernels.argmax")
    assert old is argmax


def test_the_old_single_module_lessons_keep_their_names():
    # `from course_kit import roofline, capture, cuda_graphs as cg` then `roofline.op_cost(...)`
    from course_kit import capture, cuda_graphs, roofline
    from course_kit.capture import methods
    from course_kit.cuda_graphs import runner
    from course_kit.roofline import ceilings
    assert roofline.op_cost is ceilings.op_cost
    assert capture.compare is methods.compare
    assert cuda_graphs.DecodeGraphRunner is runner.DecodeGraphRunner
    with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
        roofline.nonexistent


def test_an_unknown_name_is_still_an_import_error():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("course_kit.no_such_lesson")


def test_a_moved_function_is_forwarded_from_its_old_module():
    # bench.run_topic (notebooks saved before the move) is benchmarks.run_topic, with a warning
    from course_kit import bench, benchmarks
    with pytest.warns(FutureWarning, match="moved to course_kit.benchmarks.run_topic"):
        assert bench.run_topic is benchmarks.run_topic
    with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
        bench.nonexistent
