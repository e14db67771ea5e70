"""lint_source / lint_paths: the API of SPEC §1, and the linter's reach (loops, helpers, frameworks)."""

import subprocess
import sys
import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gradguard as gg
from gradguard import GradguardError
from _findings import codes



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
    # a hook of automatic optimization: the framework back-propagates the returned loss, steps and clears
    hook = """
    import pytorch_lightning as pl

    class M(pl.LightningModule):
        def training_step(self, batch, batch_idx):
            loss = self(batch).mean()
            self.log("loss", loss)
            return loss
    """
    assert codes(hook) == []
    # a method of the user's own that loops over batches is no hook: no framework runs it, the user's code
    # does, and it is checked like any loop (here it never clears: every step re-applies the earlier gradients)
    own_loop = """
    import pytorch_lightning as pl

    class M(pl.LightningModule):
        def fit_loop(self, loader):
            for batch in loader:
                self(batch).backward()
                self.optimizer.step()
    """
    assert codes(own_loop) == ["GG101"]
    assert codes(own_loop.replace("            for batch in loader:\n",
                                  "            for batch in loader:\n                self.optimizer.zero_grad()\n")) == []
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


_AGENT = """
import torch


class Agent:
    def __init__(self, net):
        self.net = net
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=1e-3)

    def update(self, batch):
        self.net(batch).mean().backward()
        self.optimizer.step()
"""


@pytest.mark.parametrize(
    "script, stale",
    [
        # the loop is in another file and clears nothing: every update() steps all earlier gradients
        ("from agent import Agent\nagent = Agent(net)\nfor b in batches:\n    agent.update(b)\n", True),
        # the caller clears the agent's optimizer (or its module) itself
        ("for b in batches:\n    agent.optimizer.zero_grad()\n    agent.update(b)\n", False),
        ("for b in batches:\n    agent.net.zero_grad()\n    agent.update(b)\n", False),
        # the module is handed to code that may clear it (here a helper of unknown effect)
        ("for b in batches:\n    reset(agent.net)\n    agent.update(b)\n", False),
        # a helper clears .grad of whatever parameters it is given
        ("def clear(params):\n    for p in params:\n        p.grad = None\n", False),
        # another class's own attributes of the same names (DDPG beside TD3) reach no Agent
        ("class Other:\n    def __init__(self, net):\n        self.net = net\n        self.target = copy(self.net)\n"
         "        self.optimizer = torch.optim.SGD(self.net.parameters(), lr=0.1)\n"
         "    def update(self):\n        self.optimizer.zero_grad()\n        self.net.zero_grad()\n", True),
    ],
)
def test_gg101_object_optimizer_never_cleared_across_files(tmp_path, script, stale):
    """An object's optimizer stepped in a method without a loop is reported only where no
    code of the linted tree may clear it (the method's loop lives elsewhere)."""
    (tmp_path / "agent.py").write_text(_AGENT)
    (tmp_path / "main.py").write_text(script)
    found = [(f.code, f.path, f.line) for f in gg.lint_paths([str(tmp_path)])]
    if stale:  # at the step (the calling loop, followed into update(), may report its call too)
        assert ("GG101", str(tmp_path / "agent.py"), 12) in found
    else:
        assert found == []


# --- property: correct loops stay clean, the bug beside them is found ---------------
_NOISE = st.sampled_from(
    [
        "x = x.to(device)",
        "if step % 100 == 0:\n    print(loss.item())",
        "with torch.no_grad():\n    acc = (model(x).argmax(1) == y).float().mean()",
        "scheduler.step()",
        "log.append(loss.item())",
    ]
)


def _loop(header, body_lines):
    body = "\n".join(textwrap.indent(b, "    ") for b in body_lines)
    return f"{header}\n{body}\n"


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(
    header=st.sampled_from(["for x, y in loader:", "for step, (x, y) in enumerate(loader):", "while True:"]),
    noise=st.lists(st.tuples(st.integers(0, 4), _NOISE), max_size=4),
    clear=st.sampled_from(
        ["optimizer.zero_grad()", "optimizer.zero_grad(set_to_none=True)", "model.zero_grad()", "for p in model.parameters():\n    p.grad = None"]
    ),
    clear_first=st.booleans(),
    clip=st.sampled_from([None, "between", "top"]),
)
def test_property_correct_loops_clean_and_bug_found(header, noise, clear, clear_first, clip):
    core = ["loss = loss_fn(model(x), y)", "loss.backward()", "optimizer.step()"]
    correct = [clear] + core if clear_first else core + [clear]
    buggy = list(core)
    for pos, line in noise:  # the same unrelated statements in both
        correct.insert(min(pos, len(correct)), line)
        buggy.insert(min(pos, len(buggy)), line)
    # A clip is not unrelated code: between the pass and the step it limits the update (clean);
    # at the top of the body it acts on a gradient already applied or cleared (GG116, in both loops).
    clip_line = "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)"
    for lines in (correct, buggy):
        if clip == "between":
            lines.insert(lines.index("loss.backward()") + 1, clip_line)
        elif clip == "top":
            lines.insert(0, clip_line)
    clip_codes = ["GG116"] if clip == "top" else []
    assert codes(_loop(header, correct)) == clip_codes
    assert sorted(codes(_loop(header, buggy))) == sorted(["GG101"] + clip_codes)


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
    # a remainder stepped alone after losses divided by accum weighs K'/K of its mean: GG111
    expected = sorted(([] if remainder else ["GG103"]) + ([] if scaled else ["GG104"]) + (["GG111"] if remainder and scaled else []))
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
        "gradguard.lint._model",
        "gradguard.lint._builder",
        "gradguard.lint._ast",
        "gradguard.lint.autofix",
        "gradguard.lint.rules.gg000_syntax_error",
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


# --- what cannot be checked is said, never dropped ----------------------------------
def _many_paths_loop(n_ifs=9):
    branches = "".join(f"    if c{i}:\n        opt{i}.zero_grad()\n" for i in range(n_ifs))
    return f"for x in loader:\n{branches}    model(x).backward()\n    optimizer.step()\n"


def test_skipped_loops_are_reported():
    result = gg.lint.check_source(_many_paths_loop(), "t.py")
    assert result.findings == []
    (skip,) = result.skipped
    assert (skip.path, skip.line) == ("t.py", 1) and "paths" in skip.reason
    assert skip.format().startswith("t.py:1: not checked: ")
    # a smaller loop of the same shape is checked (and its bug found): the skip is about size only
    small = gg.lint.check_source(_many_paths_loop(3))
    assert small.skipped == [] and [f.code for f in small.findings] == ["GG101"]


def test_check_paths_collects_skipped(tmp_path):
    (tmp_path / "a.py").write_text(_many_paths_loop())
    (tmp_path / "b.py").write_text(BUGGY)
    result = gg.lint.check_paths([str(tmp_path)])
    assert [f.path for f in result.findings] == [str(tmp_path / "b.py")]
    assert [s.path for s in result.skipped] == [str(tmp_path / "a.py")]
    assert gg.lint.lint_paths([str(tmp_path)]) == result.findings


def test_cli_show_skipped(tmp_path, capsys):
    from gradguard.cli import main

    (tmp_path / "a.py").write_text(_many_paths_loop())
    assert main(["lint", "--no-config", str(tmp_path / "a.py")]) == 0
    assert "not checked" not in capsys.readouterr().err
    assert main(["lint", "--no-config", "--show-skipped", str(tmp_path / "a.py")]) == 0
    err = capsys.readouterr().err
    assert f"{tmp_path / 'a.py'}:1: not checked:" in err and "paths" in err


def test_recursion_error_costs_only_that_loop():
    terms = " + ".join(f"l{i}" for i in range(600))
    src = f"for x in loader:\n    loss = {terms}\n    loss.backward()\n    opt.step()\n\n" + BUGGY
    found = gg.lint_source(src)
    gg000 = [f for f in found if f.code == "GG000"]
    assert len(gg000) == 1 and gg000[0].line == 1 and "could not be checked" in gg000[0].message
    assert "cannot parse" not in gg000[0].message
    # the rules that finished still report, on both loops
    assert [(f.code, f.line) for f in found if f.code != "GG000"] == [("GG101", 4), ("GG101", 10)]


@pytest.mark.parametrize("newline", ["\r", "\r\n"])
def test_carriage_return_line_ends(newline):
    src = "# header" + newline + "import torch" + newline + BUGGY.replace("\n", newline)
    assert [(f.code, f.line, f.col) for f in gg.lint_source(src)] == [("GG101", 7, 5)]
    # a lone \r in the middle of a file that otherwise uses \n
    mixed = "x = 1\rz = 2\n" + BUGGY
    assert [(f.code, f.line) for f in gg.lint_source(mixed)] == [("GG101", 7)]


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="this Python parses 3.12 syntax itself")
@pytest.mark.parametrize(
    "line",
    [
        "type Batch = list[int]", "def first[T](xs: list[T]) -> T:\n    return xs[0]", "class Box[T]:\n    pass",
        "x = f\"{'a' + f\"{1}\"}\"",
        # PEP 701: a replacement field spanning lines, a backslash, a comment, the same quotes, nesting
        "print(f'params: {count(\n    model)}')",
        "x = f\"{'\\n'.join(names)}\"",
        "x = f'''{a  # the count\n}'''",
        "x = f\"{d[\"k\"]}\"",
        "x = f\"{f\"{f\"{1}\"}\"}\" if ok else f'{y!r:>{w}}'",
    ],
)
def test_newer_python_syntax_is_not_an_error(line, tmp_path, capsys):
    from gradguard.cli import main

    src = line + "\n" + BUGGY
    from gradguard.lint import check_source

    result = check_source(src, "new.py")
    assert result.findings == []
    (skip,) = result.skipped
    assert skip.line == 1 and "Python 3.12" in skip.reason and "3.11" in skip.reason
    path = tmp_path / "new.py"
    path.write_text(src)
    assert main(["lint", "--no-config", str(path)]) == 0
    assert "Python 3.12" in capsys.readouterr().err
    # a real syntax error is still GG000, with a 1-based column
    (f,) = gg.lint_source("def f(:\n    pass\n")
    assert (f.code, f.line, f.col) == ("GG000", 1, 7)


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="this Python parses 3.12 syntax itself")
@pytest.mark.parametrize(
    "src, line",
    [
        ("x = f'{a +}'\n", 1),  # a field that no Python parses
        ("x = f\"{d[\"k\"}\"\n", 1),  # an unclosed bracket in a field
        ("x = f\"{d[\"k\"]}\"\nprint 'done'\n", 2),  # a valid 3.12 f-string, then a Python 2 print
        ("type Batch = list[int]\ndef f(:\n    pass\n", 2),  # a type alias, then broken code
        ("print 'hello'\n", 1),
    ],
)
def test_real_syntax_errors_beside_newer_syntax_stay_errors(src, line, tmp_path):
    from gradguard.cli import main
    from gradguard.lint import check_source

    (f,) = gg.lint_source(src + BUGGY)
    assert (f.code, f.line, f.severity) == ("GG000", line, "error")
    assert check_source(src, "old.py").skipped == []
    path = tmp_path / "old.py"
    path.write_text(src)
    assert main(["lint", "--no-config", str(path)]) == 1


@pytest.mark.slow  # several seconds on a busy 2-core machine
def test_many_helpers():
    """A module of many helper functions calling each other: the call graph is followed
    (its speed is measured in benchmarks/bench_lint.py --helpers, not asserted here)."""
    helpers = "".join(f"def h{i}(model, x):\n    y = model(x)\n    return h{i + 1}(model, y) if x else y\n\n" for i in range(1000))
    src = helpers + "def train(model, loader, opt):\n    for x in loader:\n        h0(model, x).backward()\n        opt.step()\n"
    assert [(f.code, f.line) for f in gg.lint_source(src)] == [("GG101", 4004)]
    fixed = src.replace("        opt.step()\n", "        opt.step()\n        opt.zero_grad()\n")
    assert gg.lint_source(fixed) == []


@pytest.mark.slow  # several seconds on a busy 2-core machine
def test_a_file_above_the_size_limit_is_skipped_with_a_notice(tmp_path):
    from gradguard.lint import MAX_FILE_BYTES, MAX_FILE_LINES

    buggy_tail = "for x in data:\n    model(x).backward()\n    opt.step()\n"
    big = tmp_path / "generated.py"
    big.write_text("x = 1\n" * MAX_FILE_LINES + buggy_tail)
    notes, skipped = [], []
    assert gg.lint_paths([str(big)], notify=notes.append, skipped=skipped) == []
    assert len(notes) == 1 and "generated.py" in notes[0] and f"{MAX_FILE_LINES:,}" in notes[0]
    assert [s.path for s in skipped] == [str(big)]
    # negative control: just under the limit the file is checked and the bug found
    under = tmp_path / "under.py"
    under.write_text("x = 1\n" * (MAX_FILE_LINES - 10) + buggy_tail)
    assert [f.code for f in gg.lint_paths([str(under)], notify=notes.append)] == ["GG101"]
    # a file too large in bytes is not even read
    wide = tmp_path / "wide.py"
    wide.write_text("x = '" + "a" * MAX_FILE_BYTES + "'\n")
    assert gg.lint_paths([str(wide)], notify=notes.append) == [] and "bytes" in notes[-1]
