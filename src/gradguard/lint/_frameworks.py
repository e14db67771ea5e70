"""Code that a training framework drives: not the raw loops the rules describe.

Lightning calls ``training_step`` and does backward, step and zero_grad itself;
an HF ``Trainer`` subclass overrides ``compute_loss``/``training_step`` while the
Trainer owns the loop. Read as raw PyTorch, these look like bugs, so the linter
stays silent on them (except GG301, about the ``compute_loss`` override itself, and GG116,
a clip in a ``training_step`` that Lightning calls before its backward pass).
Accelerate and Fabric loops are the user's own (see :mod:`._flow` for
``accelerator.accumulate``'s window). Lightning's manual
optimization (``self.automatic_optimization = False``) is the user's own loop:
its ``training_step`` is checked like one iteration of a raw loop.
"""

from __future__ import annotations

import ast

from typing import Optional

from ._ast import subtree, terminal, text
from ._project import _FRAMEWORK_PACKAGES, Project

#: Base classes whose methods a framework calls: their code is not a raw loop.
_FRAMEWORK_BASES = ("LightningModule", "LightningLite", "LightningFlow", "Callback", "Trainer", "Strategy", "Precision", "Loop")

#: Hook names a framework calls with its own backward/step/zero_grad around them.
FRAMEWORK_HOOKS = frozenset(
    {
        "training_step",
        "validation_step",
        "test_step",
        "predict_step",
        "compute_loss",
        "optimizer_step",
        "optimizer_zero_grad",
        "configure_optimizers",
        "manual_backward",
        "backward",
        "on_before_zero_grad",
        "on_before_optimizer_step",
        "on_after_backward",
        "on_before_backward",
    }
)


def _derives(cls: ast.ClassDef, project: Optional[Project], path: Optional[str], suffixes, packages, by_name: bool = True) -> bool:
    """Whether a base of ``cls`` is (or derives from) a class of ``packages`` whose name ends with
    one of ``suffixes``, resolved through the imports and class headers of the files linted
    together. A base that cannot be resolved (a package outside the linted files, a star
    import) is judged by its name, as the only evidence there is."""
    for base in cls.bases:
        written = text(base)
        if project is None:
            found, unknown = set(), True
        else:
            found, unknown = project.external_bases(written, path)
        if any(q.split(".")[0] in packages and q.rsplit(".", 1)[-1].endswith(suffixes) for q in found):
            return True
        if by_name and unknown and terminal(base).endswith(suffixes):
            return True
    return False


def is_framework_class(cls: ast.ClassDef, project: Optional[Project] = None, path: Optional[str] = None) -> bool:
    """A class derived from a Lightning module/callback or an HF ``Trainer``: resolved from the
    imports (``from transformers import Trainer``, ``import lightning as L``) and the bases of the
    project's own classes; by base name only where the base cannot be resolved.

    >>> is_framework_class(ast.parse("class M(pl.LightningModule): pass").body[0])
    True
    >>> is_framework_class(ast.parse("class Net(nn.Module): pass").body[0])
    False
    >>> src = "class Trainer:\\n    pass\\nclass PPOTrainer(Trainer):\\n    pass\\n"
    >>> is_framework_class(ast.parse(src).body[1], Project([("a.py", src)]), "a.py")
    False
    """
    return _derives(cls, project, path, _FRAMEWORK_BASES, _FRAMEWORK_PACKAGES)


def is_framework_by_name_only(cls: ast.ClassDef, project: Optional[Project] = None, path: Optional[str] = None) -> bool:
    """A framework class (:func:`is_framework_class`) only by the name of a base that could not be
    resolved (``class DDPGTrainer(TorchTrainer)`` with ``TorchTrainer`` from a package outside the
    linted files): nothing shows that a framework's loop, clearing around its methods, drives it.

    >>> src = "from rlkit.torch import TorchTrainer\\nclass T(TorchTrainer):\\n    pass\\n"
    >>> is_framework_by_name_only(ast.parse(src).body[1], Project([("a.py", src)]), "a.py")
    True
    >>> src = "from transformers import Trainer\\nclass T(Trainer):\\n    pass\\n"
    >>> is_framework_by_name_only(ast.parse(src).body[1], Project([("a.py", src)]), "a.py")
    False
    """
    return is_framework_class(cls, project, path) and not _derives(cls, project, path, _FRAMEWORK_BASES, _FRAMEWORK_PACKAGES, by_name=False)


def is_framework_hook(fn: ast.AST) -> bool:
    """A function named like a framework hook (``training_step``, ``compute_loss``, ...)."""
    return getattr(fn, "name", None) in FRAMEWORK_HOOKS


def is_hf_trainer_class(cls: ast.ClassDef, project: Optional[Project] = None, path: Optional[str] = None) -> bool:
    """A subclass of the HF ``Trainer`` (``Trainer``, ``Seq2SeqTrainer``, trl's ``SFTTrainer``, ...),
    resolved as :func:`is_framework_class` resolves: a project's own ``Trainer`` is none.

    >>> is_hf_trainer_class(ast.parse("class T(transformers.Trainer): pass").body[0])
    True
    >>> src = "from lightning import Trainer\\nclass T(Trainer):\\n    pass\\n"
    >>> is_hf_trainer_class(ast.parse(src).body[1], Project([("a.py", src)]), "a.py")
    False
    """
    return _derives(cls, project, path, ("Trainer",), ("transformers", "trl"))


def runs_own_loop(cls: ast.ClassDef) -> bool:
    """A trainer class that overrides the loop itself (``def train(self)`` or the HF Trainer's
    ``_inner_training_loop``) with backward passes and steps in it: a PPO trainer on the HF
    ``Trainer``, a project's own ``Trainer``. Its loop is the user's, checked like raw PyTorch,
    whatever its base is called.

    >>> src = "class PPOTrainer(Trainer):\\n    def train(self):\\n        for b in self.dl:\\n            self.acc.backward(self.loss(b))\\n            self.opt.step()"
    >>> runs_own_loop(ast.parse(src).body[0])
    True

    Any other method that is no framework hook and holds a loop whose body back-propagates and
    steps (``def train_epoch(self, loader): for batch in loader: ... loss.backward() ...
    self.optimizer.step()``) runs its own loop too: a framework calls its hooks once per batch, it
    does not run a loop over batches in a method of the user's.

    >>> src = "class T(BaseTrainer):\\n    def epoch(self, dl):\\n        for b in dl:\\n            self.f(b).backward()\\n            self.o.step()"
    >>> runs_own_loop(ast.parse(src).body[0])
    True
    >>> src = "class M(L.LightningModule):\\n    def training_step(self, b, i):\\n        for x in b:\\n            self.manual_backward(self.f(x))\\n            self.o.step()"
    >>> runs_own_loop(ast.parse(src).body[0])
    False
    """
    def steps_and_backward(node: ast.AST) -> bool:
        attrs = {c.func.attr for c in subtree(node) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)}
        return "step" in attrs and ("backward" in attrs or "manual_backward" in attrs)

    for fn in cls.body:
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if fn.name in ("train", "_inner_training_loop", "fit") and steps_and_backward(fn):
            return True
        if not is_framework_hook(fn) and any(
                isinstance(n, (ast.For, ast.AsyncFor, ast.While)) and steps_and_backward(n) for n in subtree(fn)):
            return True
    return False


def is_lightning_module(cls: ast.ClassDef, project: Optional[Project] = None, path: Optional[str] = None) -> bool:
    """A Lightning ``LightningModule`` subclass, resolved as :func:`is_framework_class` resolves.

    >>> is_lightning_module(ast.parse("class M(L.LightningModule): pass").body[0])
    True
    >>> is_lightning_module(ast.parse("class C(L.Callback): pass").body[0])
    False
    """
    return _derives(cls, project, path, ("LightningModule",), _FRAMEWORK_PACKAGES)


def is_manual_lightning(cls: ast.ClassDef, project: Optional[Project] = None, path: Optional[str] = None) -> bool:
    """A Lightning module with manual optimization (``self.automatic_optimization = False``):
    its ``training_step`` does backward, step and clearing itself, like a raw loop.

    >>> src = "class M(L.LightningModule):\\n    def __init__(self):\\n        self.automatic_optimization = False"
    >>> is_manual_lightning(ast.parse(src).body[0])
    True
    """
    if not is_framework_class(cls, project, path) or is_hf_trainer_class(cls, project, path):
        return False
    for node in subtree(cls):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and node.value.value is False:
            if any(isinstance(t, ast.Attribute) and t.attr == "automatic_optimization" for t in node.targets):
                return True
        if isinstance(node, ast.FunctionDef) and node.name == "automatic_optimization":
            returns = [r.value for r in subtree(node) if isinstance(r, ast.Return)]
            if returns and all(isinstance(v, ast.Constant) and v.value is False for v in returns):
                return True
    return False
