"""Where attention lives: every Triton kernel under course_kit/attention (or the decode step's
decode_kernels) with a unique name, one
online-softmax fold per language, and the Triton interpreter switched on only when a kernel is
asked for (importing the model or the engine must leave it alone)."""
import ast
import os
import pathlib
import subprocess
import sys

import pytest
import torch

import course_kit
from course_kit.attention import online_softmax_update

PACKAGE = pathlib.Path(course_kit.__file__).parent


def _is_triton_jit(node: ast.expr) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    return isinstance(target, ast.Attribute) and target.attr == "jit" and \
        isinstance(target.value, ast.Name) and target.value.id == "triton"


def _triton_functions() -> list[tuple[str, str]]:
    """(file relative to the package, function name) of every @triton.jit function."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and any(_is_triton_jit(d) for d in node.decorator_list):
                found.append((path.relative_to(PACKAGE).as_posix(), node.name))
    return found


# Triton kernels live in two places: attention (notebooks 06 and 08) and the decode step's
# matrix-vector, RoPE and argmax kernels (notebook 05). Each switches the interpreter on itself.
KERNEL_PACKAGES = ("attention/", "cuda_graphs/decode_kernels/")


def test_every_triton_kernel_lives_in_a_kernel_package_under_its_own_name():
    found = _triton_functions()
    assert len(found) >= 10, f"the scan found too few Triton functions to be looking right: {found}"
    outside = [f for f in found if not f[0].startswith(KERNEL_PACKAGES)]
    assert not outside, f"Triton functions outside {KERNEL_PACKAGES}: {outside}"
    for package in KERNEL_PACKAGES:
        for path in sorted((PACKAGE / package).glob("*.py")):
            text = path.read_text()
            if "@triton.jit" in text:
                assert "use_triton_interpreter_without_cuda()" in text, f"{path.name} defines kernels first"
    names: dict[str, set[str]] = {}
    for file, name in found:
        names.setdefault(name, set()).add(file)
    # _tensor_desc is defined twice in one file, as alternatives for old and new Tritons
    shared = {n: sorted(f) for n, f in names.items() if len(f) > 1}
    assert not shared, f"Triton functions sharing a name across files: {shared}"


def test_every_triton_softmax_goes_through_the_one_fold():
    # exp2 of scores (the online softmax's rescale) is written only in triton_softmax.py; the
    # backward recomputes P from the saved log-sum-exp, which is not a fold. Gluon is a language
    # of its own (its tensors carry layouts, so it cannot call Triton's fold): gluon_flash.py has
    # its one fold, `_softmax`.
    for path in sorted((PACKAGE / "attention").glob("*.py")):
        text = path.read_text()
        if path.name in ("triton_softmax.py", "triton_flash_bwd.py"):
            continue
        if path.name == "gluon_flash.py":
            assert text.count("exp2(m") == 1 and "def _softmax(" in text, "gluon_flash.py folds in more than one place"
            continue
        assert "tl.exp(" not in text and "exp2(m" not in text, f"{path.name} rescales on its own"


def test_torch_fold_carries_the_output_like_softmax_times_v():
    g = torch.Generator().manual_seed(0)
    s = torch.randn(3, 5, 12, generator=g, dtype=torch.float64) * 4
    s[0, 0, :7] = float("-inf")                      # a row whose first block is fully masked
    v = torch.randn(3, 12, 8, generator=g, dtype=torch.float64)
    m = torch.full((3, 5), float("-inf"), dtype=torch.float64)
    l = torch.zeros(3, 5, dtype=torch.float64)
    acc = torch.zeros(3, 5, 8, dtype=torch.float64)
    for lo, hi in ((0, 7), (7, 12)):
        m, l, acc = online_softmax_update(m, l, s[..., lo:hi], acc, v[:, lo:hi])
    torch.testing.assert_close(acc / l.unsqueeze(-1), torch.softmax(s, -1) @ v)
    m2, l2 = online_softmax_update(torch.full((3, 5), float("-inf"), dtype=torch.float64),
                                   torch.zeros(3, 5, dtype=torch.float64), s)
    torch.testing.assert_close(l2, l)


_PROBE = """
import os, sys
import torch
from course_kit.engine import Engine, SamplingParams
from course_kit.models import llama
model = llama.Transformer.from_preset("tiny", seed=0)
Engine(model, max_num_seqs=2, block_size=4).generate([[1, 2, 3], [4, 5]], SamplingParams(max_new_tokens=3))
print("after engine:", os.environ.get("TRITON_INTERPRET"))
if "--kernel" in sys.argv:
    from course_kit.attention import triton_flash
    print("after kernel:", os.environ.get("TRITON_INTERPRET"), triton_flash.interpreting())
"""


def test_importing_the_model_and_engine_leaves_the_triton_interpreter_alone():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["CUDA_VISIBLE_DEVICES"] = ""          # a CPU-only machine, even on a GPU host
    args = [sys.executable, "-c", _PROBE]
    try:
        import triton  # noqa: F401
        args.append("--kernel")
    except ImportError:
        pass
    out = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "after engine: None" in out.stdout, out.stdout
    if "--kernel" in args:
        assert "after kernel: 1 True" in out.stdout, out.stdout


@pytest.mark.parametrize("kind", ["decode", "paged"])
def test_set_attention_takes_registered_names_and_callables(kind):
    from course_kit.attention import registry
    from course_kit.models import llama
    model = llama.Transformer.from_preset("tiny", seed=0)
    name = "grouped" if kind == "decode" else "engine"
    model.set_attention(**{kind: name})
    assert getattr(model, f"{kind}_attention") is registry.lookup(kind, name)
    fn = lambda *a: None  # noqa: E731
    llama.register_attention(kind, "test-only", fn)
    try:
        model.set_attention(**{kind: "test-only"})
        assert getattr(model, f"{kind}_attention") is fn
    finally:
        del (registry.DECODE_ATTENTION if kind == "decode" else registry.PAGED_ATTENTION)["test-only"]
    with pytest.raises(ValueError, match="unknown .* attention 'nope'"):
        model.set_attention(**{kind: "nope"})
