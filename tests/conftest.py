import os

import torch

# Without a GPU, Triton kernels run on CPU tensors through Triton's interpreter; the variable must
# be set before triton is imported.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
    # The tests use tiny models, for which thread start-up costs more than a second core gains.
    torch.set_num_threads(1)
os.environ.setdefault("COURSE_KIT_SMOKE", "1")

import pytest  # noqa: E402


def pytest_collection_modifyitems(config, items):
    import torch
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU; run `pytest -m gpu` on a GPU machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
