"""The per-update view's cost and its cheap proofs (see ``gradguard.lint._per_call``).

Linting a package of thousands of files with the view once took minutes: every candidate function
searched the text of every other linted file, and every assignment of its own file, for its callers.
The callers are now indexed once per file and once per set of files linted together; these tests count
the searches (never the time) and check that each cheap proof answers as the search it replaces.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from gradguard.lint import _per_call, lint_paths, lint_source

HERE = Path(__file__).parent
PROGRAMS = sorted((HERE / "lint_fixtures").glob("*.py")) + sorted((HERE / "lint_corpus").rglob("*.py"))

UPDATE = """\
import torch


def {fn}(model, {opt}, batch):
    loss = model(batch).pow(2).mean()
    loss.backward()
    {opt}.step()
"""

CALLER = """\
from updates_{i} import {fn}


def run_{i}(model, {opt}, data):
    for batch in data:
        {fn}(model, {opt}, batch)
"""


class _Counting:
    """``_CLEARS`` with its searches counted (every other use passes through)."""

    def __init__(self, pattern):
        self.pattern, self.calls = pattern, 0

    def search(self, *args):
        self.calls += 1
        return self.pattern.search(*args)

    def finditer(self, *args):
        self.calls += 1
        return self.pattern.finditer(*args)

    def __getattr__(self, name):
        return getattr(self.pattern, name)


def _project(tmp_path: Path, n: int) -> Path:
    for i in range(n):
        (tmp_path / f"updates_{i}.py").write_text(UPDATE.format(fn="train_step", opt="opt"))
        (tmp_path / f"run_{i}.py").write_text(CALLER.format(i=i, fn="train_step", opt="opt"))
    return tmp_path


@pytest.mark.parametrize("n", [8, 24])
def test_the_callers_of_every_update_are_searched_once_per_file_not_once_per_update(tmp_path, monkeypatch, n):
    # n files each define a per-update `train_step` and n others call a function of that name: before
    # the index, each of the n updates searched all 2n texts (4n^2 searches for 2n files)
    counting = _Counting(_per_call._CLEARS)
    monkeypatch.setattr(_per_call, "_CLEARS", counting)
    findings = lint_paths([str(_project(tmp_path, n))])
    # every update is reported: no caller in the linted files clears (the negative control of the silence below)
    assert sorted(Path(f.path).name for f in findings if f.code == "GG101" and "updates_" in f.path) == sorted(
        f"updates_{i}.py" for i in range(n))
    # and each caller's loop, which reads the helper it imports as its own, clears nothing either
    assert sorted(Path(f.path).name for f in findings if f.code == "GG101" and "run_" in f.path) == sorted(
        f"run_{i}.py" for i in range(n))
    # at most a few searches per file (its text once, its functions' own texts once each), not per pair
    assert counting.calls <= 6 * (2 * n), counting.calls


def test_a_caller_in_another_file_that_clears_silences_every_update_through_the_index(tmp_path):
    # the same project, with one caller clearing before the call: every update of that name may be its callee
    root = _project(tmp_path, 6)
    (root / "run_3.py").write_text(CALLER.format(i=3, fn="train_step", opt="opt").replace(
        "        train_step(", "        opt.zero_grad()\n        train_step("))
    found = [f for f in lint_paths([str(root)]) if f.code == "GG101"]
    assert [f for f in found if "updates_" in f.path] == []
    # the callers that do not clear are still found at their own loops (each reads its helper as its own)
    assert sorted(Path(f.path).name for f in found) == sorted(f"run_{i}.py" for i in range(6) if i != 3)
    # renamed in the caller only: it calls something else, and every update is reported again
    (root / "run_3.py").write_text(CALLER.format(i=3, fn="train_step", opt="opt").replace(
        "        train_step(", "        opt.zero_grad()\n        train_step_other(").replace(
        "import train_step", "import train_step_other"))
    assert len([f for f in lint_paths([str(root)]) if f.code == "GG101" and "updates_" in f.path]) == 6


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.name)
def test_the_line_restricted_clear_search_answers_as_the_whole_text_search(path):
    text = path.read_text()
    assert _per_call._may_clear(text) == bool(_per_call._CLEARS.search(text))
    # and on every function-sized piece (a caller's own text)
    for piece in text.split("\ndef "):
        assert _per_call._may_clear(piece) == bool(_per_call._CLEARS.search(piece)), piece[:80]


@pytest.mark.parametrize("text, clears", [
    ("opt.ZERO_GRAD()\n", True),
    ("x = 1\nnet.Clear_Grad()", True),
    ("p.grad .zero_()\n", True),
    ("torch._foreach_zero_(grads)\n", True),
    ("p.grad == None\n", False),
    ("# the gradient is kept\nupgrade()\n", False),
    ("İİİ\nm.zero_grad()\n", True),  # a character whose lower case is longer: the whole text is searched
    ("İİİ\nm.step()\n", False),
])
def test_the_line_restricted_clear_search_on_cases_and_offsets(text, clears):
    assert _per_call._may_clear(text) is clears
    assert bool(_per_call._CLEARS.search(text)) is clears


def test_files_named_by_word_as_the_word_boundary_search(tmp_path):
    from gradguard.lint._project import Project

    texts = {
        "a.py": "train_step(x)\n", "b.py": "xtrain_step(x)\n", "c.py": "obj.train_step\n",
        "d.py": "train_steps = 1\n", "e.py": "# train_step\n", "f.py": "é_train_step = 1\n",
    }
    index = _per_call._FilesIndex.of(Project(texts.items()))
    found = index.naming({"train_step"}, "a.py")
    pattern = re.compile(r"\btrain_step\b")
    assert found == [p for p, t in texts.items() if p != "a.py" and pattern.search(t)] == ["c.py", "e.py"]


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.name)
def test_the_cheap_proof_that_no_step_runs_changes_no_finding(path, monkeypatch):
    # with the proof, and with every function walked as if it might step: the same findings
    text = path.read_text()
    kept = [(f.code, f.line, f.message) for f in lint_source(text, str(path))]
    monkeypatch.setattr(_per_call._PerCallBodies, "_may_step", lambda self, fn, closures: True)
    assert [(f.code, f.line, f.message) for f in lint_source(text, str(path))] == kept


def test_a_step_reached_through_a_closure_is_not_proved_away():
    # the update's own lines hold no step word: the step is in a closure of the factory
    src = textwrap.dedent("""\
        def make(net, solver):
            def apply():
                solver.step()

            def update(batch):
                out = net(batch).pow(2).mean()
                out.backward()
                apply()
            return update
    """)
    assert [f.code for f in lint_source(src, "t.py")] == ["GG101"]
    # negative control: the update clears first, and nothing is reported
    fixed = src.replace("        out = net(", "        solver.zero_grad()\n        out = net(")
    assert [f.code for f in lint_source(fixed, "t.py")] == []


def test_an_optimizer_wrapper_handed_the_loss_is_not_one_update():
    # `self.opt.step(loss)` (tianshou's optimizer wrapper): the wrapper back-propagates and clears in code
    # the view does not read; `step(closure)` (handed a function) and `scaler.step(opt)` stay one update
    src = textwrap.dedent("""\
        class Agent:
            def __init__(self, net, opt, aux_opt):
                self.net, self.opt, self.aux_opt = net, opt, aux_opt

            def update(self, batch):
                actor_loss, extra = self.net(batch)
                self.opt.step(actor_loss)
                aux = extra.pow(2).mean()
                aux.backward()
                self.aux_opt.step()
    """)
    assert [f.code for f in lint_source(src, "t.py")] == []
    # negative control: the same update with the wrapper call written as a plain backward and step
    plain = src.replace("self.opt.step(actor_loss)", "actor_loss.backward()\n        self.opt.step()")
    assert sorted(f.code for f in lint_source(plain, "t.py")) == ["GG101", "GG101"]
    closure = src.replace("self.opt.step(actor_loss)", "def closure():\n            return actor_loss\n        self.opt.step(closure)")
    assert "GG101" in [f.code for f in lint_source(closure, "t.py")]  # still read as one update
