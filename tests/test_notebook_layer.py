"""The thin notebook layer: OOM becomes a clear skip, GPU-only sections show the reference."""
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
