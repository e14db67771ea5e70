"""Loops that train through an optimizer wrapper or trainer class defined in another file.

The linter follows ``optim_wrapper.update_params(loss)``, ``self.optim.backward(loss)``,
``self.optim.zero_grad()`` into the methods of the class that the loop's file imports from
another file of the linted tree (mmengine's ``OptimWrapper``, OpenNMT-py's ``Optimizer``): the
object is resolved from its construction or its parameter annotation and the import, never by
its name. Each shape is a correct program (no finding) and the same program with the bug.
"""

import textwrap

import gradguard as gg

WRAPPER = '''
class OptimWrapper:
    """mmengine-style: backward, step and clearing in methods that call each other."""

    def __init__(self, optimizer):
        self.optimizer = optimizer

    def backward(self, loss):
        loss.backward()

    def step(self):
        self.optimizer.step()

    def zero_grad(self):
        self.optimizer.zero_grad()

    def update_params(self, loss):
        self.backward(loss)
        self.step()
        {clear}
'''

LOOP = '''
import torch

from .wrapper import OptimWrapper


def train(model, loader, loss_fn):
    optim_wrapper = OptimWrapper(torch.optim.SGD(model.parameters(), lr=0.1))
    for x, y in loader:
        loss = loss_fn(model(x), y)
        optim_wrapper.update_params(loss)
'''


def _write(root, files):
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
    return root


def test_an_update_method_of_a_wrapper_in_another_file_that_clears_is_correct(tmp_path):
    root = _write(tmp_path / "pkg", {"wrapper.py": WRAPPER.format(clear="self.zero_grad()"), "train.py": LOOP})
    assert gg.lint_paths([root]) == []


def test_an_update_method_of_a_wrapper_in_another_file_that_never_clears_is_found(tmp_path):
    root = _write(tmp_path / "pkg", {"wrapper.py": WRAPPER.format(clear="pass"), "train.py": LOOP})
    found = gg.lint_paths([root])
    # reported at the loop's call, in the loop's file (the wrapper's lines belong to the other file)
    assert [(f.code, f.path.endswith("train.py"), f.line) for f in found] == [("GG101", True, 10)]
    assert found[0].fix is None  # no edit of the call line repairs the wrapper: no fix offered


def test_the_loop_file_alone_knows_nothing_of_the_wrapper(tmp_path):
    root = _write(tmp_path / "pkg", {"wrapper.py": WRAPPER.format(clear="pass"), "train.py": LOOP})
    assert gg.lint_paths([root / "train.py"]) == []


def test_a_class_of_that_name_that_the_file_does_not_import_is_not_followed(tmp_path):
    # the loop imports OptimWrapper from a package outside the tree: another file's class of the
    # same name (that never clears) says nothing about it
    loop = LOOP.replace("from .wrapper import OptimWrapper", "from mmengine.optim import OptimWrapper")
    root = _write(tmp_path / "pkg", {"wrapper.py": WRAPPER.format(clear="pass"), "train.py": loop})
    assert gg.lint_paths([root]) == []
    # negative control: imported from the file of the tree, the same program is reported
    (root / "train.py").write_text(textwrap.dedent(loop.replace("mmengine.optim", "pkg.wrapper")).lstrip())
    assert [f.code for f in gg.lint_paths([root])] == ["GG101"]


OPTIMIZER = '''
import torch


class Optimizer:
    """OpenNMT-py-style: the trainer calls zero_grad/backward/step on this wrapper."""

    def __init__(self, optimizer, learning_rate):
        self._optimizer = optimizer
        self.learning_rate = learning_rate
        self.training_step = 1

    def zero_grad(self, set_to_none=True):
        {zero_grad}

    def backward(self, loss):
        loss.backward()

    def step(self):
        for group in self._optimizer.param_groups:
            group["lr"] = self.learning_rate
        self._optimizer.step()
        self.training_step += 1
'''

TRAINER = '''
from onmt.utils.optimizers import Optimizer


class Trainer:
    def __init__(self, model, train_loss, optim: Optimizer, accum_count=1):
        self.model = model
        self.train_loss = train_loss
        self.optim = optim
        self.accum_count = accum_count

    def train(self, train_iter, train_steps):
        for i, batches in enumerate(train_iter):
            self.optim.zero_grad(set_to_none=True)
            self._gradient_accumulation(batches)
            self.optim.step()
            if self.optim.training_step > train_steps:
                break

    def _gradient_accumulation(self, batches):
        for batch in batches:
            loss = self.train_loss(self.model(batch.src), batch.tgt)
            self.optim.backward(loss / self.accum_count)
'''


def _onmt(tmp_path, zero_grad):
    return _write(tmp_path, {
        "onmt/__init__.py": "", "onmt/utils/__init__.py": "",
        "onmt/utils/optimizers.py": OPTIMIZER.format(zero_grad=zero_grad), "onmt/trainer.py": TRAINER,
    })


def test_a_trainer_whose_annotated_optimizer_wrapper_clears_is_correct(tmp_path):
    assert gg.lint_paths([_onmt(tmp_path, "self._optimizer.zero_grad(set_to_none=set_to_none)")]) == []


def test_a_trainer_whose_optimizer_wrapper_zero_grad_clears_nothing_is_found(tmp_path):
    # `self.optim.zero_grad()` is the wrapper's method, which forgets the inner optimizer: the
    # name zero_grad at the call site is no proof of a clearing once the method is known
    found = gg.lint_paths([_onmt(tmp_path, "self.training_step += 0  # forgot the inner optimizer")])
    assert [(f.code, f.path.endswith("trainer.py"), f.line) for f in found] == [("GG101", True, 15)]


def test_a_training_step_method_run_as_the_step_closure_through_partial_is_followed():
    # Lightning's build-your-own-trainer: optimizer.step(partial(self.training_step, ...)) runs the
    # method (backward included) inside the step; the clearing after it is what keeps .grad fresh
    from pathlib import Path

    source = (Path(__file__).parent / "lint_corpus" / "trainer_partial_closure.py").read_text()
    assert gg.lint_source(source) == []
    broken = source.replace("            optimizer.zero_grad()\n", "")
    assert broken != source
    assert [f.code for f in gg.lint_source(broken)] == ["GG101"]
