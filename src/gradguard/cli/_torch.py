"""The run-time subcommands need PyTorch; the linter does not (it never imports torch)."""

from __future__ import annotations

from .._errors import GradguardError


def require_torch() -> None:
    """Raise a one-line :class:`GradguardError` (exit 2) when torch cannot be imported.

    Checked before the subcommand imports anything of its own, so a machine without torch gets
    one line naming what to install, not a traceback from deep inside the demo or the watch.
    """
    try:
        import torch  # noqa: F401
    except ImportError as exc:
        raise GradguardError(
            f"this command needs PyTorch, which cannot be imported ({exc}): pip install torch "
            "(the README's quick start says which build)"
        ) from None
