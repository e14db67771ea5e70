"""gradguard: own PyTorch's ``.grad`` accumulator.

``backward()`` adds into ``.grad``; it never replaces it. gradguard makes
gradient accumulation exact (:class:`Accumulator`), and makes gradient-buffer
bugs loud: at run time (:func:`watch`, ``gradguard run``) and before it
(:func:`lint_source`, :func:`lint_paths`, ``gradguard lint``).

The whole public API is listed in ``__all__``. Names are loaded on first use,
so ``import gradguard`` (and ``gradguard lint``) does not import torch.
"""

from importlib import import_module
from typing import TYPE_CHECKING

from ._errors import GradguardError, GradientBugError, GradientBugWarning
from .findings import Finding
from .rules import RULES

from ._version import __version__

__all__ = [
    "Accumulator",
    "grads_per_step",
    "check_equivalence",
    "watch",
    "lint_source",
    "lint_paths",
    "measure_memory",
    "accumulate_batch",
    "Finding",
    "RULES",
    "GradguardError",
    "GradientBugError",
    "GradientBugWarning",
]

# name -> module that defines it (imported on first attribute access).
_LAZY = {
    "Accumulator": ".accumulate",
    "grads_per_step": ".semantics",
    "check_equivalence": ".equivalence",
    "watch": ".watcher",
    "lint_source": ".lint",
    "lint_paths": ".lint",
    "measure_memory": ".memory",
    "accumulate_batch": ".microbatches",
}


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gradguard' has no attribute {name!r}")
    try:
        value = getattr(import_module(module, __name__), name)
    except ModuleNotFoundError as exc:
        from ._torch import is_missing_torch, missing_error  # torch is not a hard dependency: say what to install

        if not is_missing_torch(exc):
            raise
        raise missing_error(f"gradguard.{name}") from None
    globals()[name] = value  # later look-ups skip __getattr__
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from .accumulate import Accumulator
    from .lint import lint_paths, lint_source
    from .microbatches import accumulate_batch
    from .memory import measure_memory
    from .equivalence import check_equivalence
    from .semantics import grads_per_step
    from .watcher import watch
