"""lint_source / lint_paths: the API of SPEC §1, and the linter's reach (loops, helpers, frameworks)."""

import subprocess
import sys
import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gradguard as gg
from gradguard import GradguardError


def codes(source, **kw):
    return [f.code for f in gg.lint_source(textwrap.dedent(source), **kw)]


BUGGY = """
for x, y in loader:
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
"""
FIXED = """
for x, y in loader:
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
"""


def test_finding_fields():
    (f,) = gg.lint_source(BUGGY, filename="train.py")
    assert (f.code, f.name, f.severity, f.path, f.line, f.col, f.step, f.params) == (
        "GG101", "stale-gradient", "error", "train.py", 5, 5, None, None,
    )
    assert f.message.startswith("`optimizer.step()`")
    assert gg.RULES["GG101"].fix in f.message  # the words come from the catalogue
    assert gg.lint_source(FIXED) == []


def test_default_filename_and_bytes():
    assert gg.lint_source(BUGGY)[0].path == "<string>"
    src = b"# -*- coding: latin-1 -*-\n# caf\xe9\n" + BUGGY.encode()
    assert [f.code for f in gg.lint_source(src)] == ["GG101"]


def test_select_and_ignore():
    src = textwrap.dedent(
        """
        total = 0
        for x, y in loader:
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            total += loss
        """
    )
    assert codes(src) == ["GG101", "GG201"]
    assert codes(src, select="GG2") == ["GG201"]
    assert codes(src, ignore=["GG101"]) == ["GG201"]
    assert codes(src, select="GG1,GG2", ignore="GG201") == ["GG101"]
    with pytest.raises(GradguardError, match="GG999"):
        gg.lint_source(src, select="GG999")


def test_suppression_comments():
    base = FIXED.replace("    optimizer.zero_grad()\n", "")
    assert codes(base) == ["GG101"]
    assert codes(base.replace("optimizer.step()", "optimizer.step()  # gradguard: ignore[GG101]")) == []
    assert codes(base.replace("optimizer.step()", "optimizer.step()  # gradguard: ignore")) == []
    assert codes(base.replace("optimizer.step()", "optimizer.step()  # gradguard: ignore[GG1]")) == []
    # another code, another line, or the text inside a string do not suppress
    assert codes(base.replace("optimizer.step()", "optimizer.step()  # gradguard: ignore[GG102]")) == ["GG101"]
    assert codes(base.replace("loss.backward()", "loss.backward()  # gradguard: ignore")) == ["GG101"]
    assert codes(base.replace("optimizer.step()", "optimizer.step('# gradguard: ignore')")) == ["GG101"]


def test_syntax_error_is_a_finding_and_other_files_are_checked(tmp_path):
    (tmp_path / "a_broken.py").write_text("def f(:\n    pass\n")
    (tmp_path / "b_train.py").write_text(BUGGY)
    (tmp_path / "notes.txt").write_text(BUGGY)
    found = gg.lint_paths([str(tmp_path)])
    assert [(f.code, f.path) for f in found] == [
        ("GG000", str(tmp_path / "a_broken.py")),
        ("GG101", str(tmp_path / "b_train.py")),
    ]
    assert found[0].line == 1


def test_paths_as_given(tmp_path, monkeypatch):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "train.py").write_text(BUGGY)
    (tmp_path / "pkg" / "__pycache__").mkdir()
    (tmp_path / "pkg" / "__pycache__" / "train.py").write_text(BUGGY)
    monkeypatch.chdir(tmp_path)
    assert [f.path for f in gg.lint_paths(["pkg"])] == ["pkg/train.py"]
    assert [f.path for f in gg.lint_paths("pkg/train.py")] == ["pkg/train.py"]
    with pytest.raises(GradguardError, match="missing.py"):
        gg.lint_paths(["missing.py"])


def test_lint_does_not_import_torch():
    code = (
        "import sys, gradguard as gg\n"
        "gg.lint_source(open(gg.__file__.replace('__init__.py', 'demo/buggy_loop.py')).read())\n"
        "from gradguard.cli import main\n"
        "main(['rule', 'GG101'])\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


# --- reach: nested blocks, while loops, helpers, methods -----------------------------
def test_follows_nested_blocks_and_helpers():
    src = """
    import torch

    def _backward(loss):
        loss.backward()

    def train(model, loader, opt, ctx):
        epoch = 0
        while epoch < 3:
            for batch in loader:
                with ctx:
                    try:
                        loss = model(batch)
                    finally:
                        pass
                if batch is not None:
                    _backward(loss)
                    opt.step()
            epoch += 1
    """
    assert codes(src) == ["GG101"]


def test_method_helpers():
    src = """
    class Runner:
        def clear(self):
            self.optimizer.zero_grad()

        def fit(self, loader):
            for batch in loader:
                self.clear()
                self.model(batch).backward()
                self.optimizer.step()
    """
    assert codes(src) == []
    assert codes(src.replace("                self.clear()\n", "")) == ["GG101"]


def test_frameworks_are_left_alone():
    lightning = """
    import pytorch_lightning as pl

    class M(pl.LightningModule):
        def fit_loop(self, loader):
            for batch in loader:
                self(batch).backward()
                self.optimizer.step()
    """
    assert codes(lightning) == []
    accelerate = """
    for step, batch in enumerate(loader):
        with accelerator.accumulate(model):
            accelerator.backward(model(batch))
            optimizer.step()
            optimizer.zero_grad()
    """
    assert codes(accelerate) == []


def test_unknown_call_that_clears_silences_gg101():
    assert codes(BUGGY + "    reset_grads(model)\n") == []


# --- property: correct loops stay clean, the bug beside them is found ---------------
_NOISE = st.sampled_from(
    [
        "x = x.to(device)",
        "if step % 100 == 0:\n    print(loss.item())",
        "with torch.no_grad():\n    acc = (model(x).argmax(1) == y).float().mean()",
        "scheduler.step()",
        "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)",
        "log.append(loss.item())",
    ]
)


def _loop(header, body_lines):
    body = "\n".join(textwrap.indent(b, "    ") for b in body_lines)
    return f"{header}\n{body}\n"


@settings(max_examples=60, deadline=None)
@given(
    header=st.sampled_from(["for x, y in loader:", "for step, (x, y) in enumerate(loader):", "while True:"]),
    noise=st.lists(st.tuples(st.integers(0, 4), _NOISE), max_size=4),
    clear=st.sampled_from(
        ["optimizer.zero_grad()", "optimizer.zero_grad(set_to_none=True)", "model.zero_grad()", "for p in model.parameters():\n    p.grad = None"]
    ),
    clear_first=st.booleans(),
)
def test_property_correct_loops_clean_and_bug_found(header, noise, clear, clear_first):
    core = ["loss = loss_fn(model(x), y)", "loss.backward()", "optimizer.step()"]
    correct = [clear] + core if clear_first else core + [clear]
    buggy = list(core)
    for pos, line in noise:  # the same unrelated statements in both
        correct.insert(min(pos, len(correct)), line)
        buggy.insert(min(pos, len(buggy)), line)
    assert codes(_loop(header, correct)) == []
    assert codes(_loop(header, buggy)) == ["GG101"]


@settings(max_examples=40, deadline=None)
@given(
    cond=st.sampled_from(["(i + 1) % accum == 0", "i % accum == accum - 1", "not (i + 1) % accum"]),
    scaled=st.booleans(),
    remainder=st.booleans(),
)
def test_property_accumulation(cond, scaled, remainder):
    loss = "loss_fn(model(x), y) / accum" if scaled else "loss_fn(model(x), y)"
    src = (
        "for i, (x, y) in enumerate(loader):\n"
        f"    loss = {loss}\n"
        "    loss.backward()\n"
        f"    if {cond}:\n"
        "        optimizer.step()\n"
        "        optimizer.zero_grad()\n"
    )
    if remainder:
        src += "optimizer.step()\noptimizer.zero_grad()\n"
    expected = sorted(([] if remainder else ["GG103"]) + ([] if scaled else ["GG104"]))
    assert sorted(codes(src)) == expected


@pytest.mark.parametrize(
    "module",
    [
        "gradguard.lint",
        "gradguard.lint._checker",
        "gradguard.lint._config",
        "gradguard.lint._events",
        "gradguard.lint._flow",
        "gradguard.lint._frameworks",
        "gradguard.lint._suppress",
        "gradguard.findings",
        "gradguard.demo.lint_part",
    ],
)
def test_docstring_examples(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module))
    assert result.failed == 0
