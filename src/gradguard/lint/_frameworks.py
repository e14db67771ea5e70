"""Code that a training framework drives: not the raw loops the rules describe.

Lightning calls ``training_step`` and does backward, step and zero_grad itself;
an HF ``Trainer`` subclass overrides ``compute_loss``/``training_step`` while the
Trainer owns the loop. Read as raw PyTorch, these look like bugs, so the linter
stays silent on them (except GG301, about the ``compute_loss`` override itself).
Accelerate and Fabric loops are the user's own (see :mod:`._flow` for
``accelerator.accumulate``'s window). Lightning's manual
optimization (``self.automatic_optimization = False``) is the user's own loop:
its ``training_step`` is checked like one iteration of a raw loop.
"""

from __future__ import annotations

import ast

from ._ast import terminal

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


def is_framework_class(cls: ast.ClassDef) -> bool:
    """A class derived from a Lightning module/callback or an HF ``Trainer`` (by base name).

    >>> is_framework_class(ast.parse("class M(pl.LightningModule): pass").body[0])
    True
    >>> is_framework_class(ast.parse("class Net(nn.Module): pass").body[0])
    False
    """
    for base in cls.bases:
        name = terminal(base)
        if any(name.endswith(suffix) for suffix in _FRAMEWORK_BASES):
            return True
    return False


def is_framework_hook(fn: ast.AST) -> bool:
    """A function named like a framework hook (``training_step``, ``compute_loss``, ...)."""
    return getattr(fn, "name", None) in FRAMEWORK_HOOKS


def is_hf_trainer_class(cls: ast.ClassDef) -> bool:
    """A subclass of the HF ``Trainer`` (``Trainer``, ``Seq2SeqTrainer``, ``SFTTrainer``, ...).

    >>> is_hf_trainer_class(ast.parse("class T(transformers.Trainer): pass").body[0])
    True
    """
    return any(terminal(base).endswith("Trainer") for base in cls.bases)


def is_manual_lightning(cls: ast.ClassDef) -> bool:
    """A Lightning module with manual optimization (``self.automatic_optimization = False``):
    its ``training_step`` does backward, step and clearing itself, like a raw loop.

    >>> src = "class M(L.LightningModule):\\n    def __init__(self):\\n        self.automatic_optimization = False"
    >>> is_manual_lightning(ast.parse(src).body[0])
    True
    """
    if not is_framework_class(cls) or is_hf_trainer_class(cls):
        return False
    for node in ast.walk(cls):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and node.value.value is False:
            if any(isinstance(t, ast.Attribute) and t.attr == "automatic_optimization" for t in node.targets):
                return True
        if isinstance(node, ast.FunctionDef) and node.name == "automatic_optimization":
            returns = [r.value for r in ast.walk(node) if isinstance(r, ast.Return)]
            if returns and all(isinstance(v, ast.Constant) and v.value is False for v in returns):
                return True
    return False
