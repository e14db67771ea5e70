"""The exception and warning types of gradguard.

Kept in one small module so that every part (accumulator, watch, linter, CLI)
raises the same types without importing each other.
"""


class GradguardError(RuntimeError):
    """Bad use of the gradguard API.

    The message names the value that is wrong and what to do about it; the
    object that raised is left exactly as it was before the call.
    """


class GradientBugError(GradguardError):
    """A gradient-buffer bug found by :func:`gradguard.watch` in ``mode="raise"``.

    Raised at the offending call (the ``step()``, ``zero_grad()`` or
    ``backward()``), before the optimizer applies a bad update.
    ``.finding`` holds the :class:`gradguard.Finding`.
    """

    def __init__(self, finding):
        super().__init__(finding.format(full=True))
        self.finding = finding


class GradientBugWarning(UserWarning):
    """A gradient-buffer bug found by :func:`gradguard.watch` in ``mode="warn"``."""


# Shown as ``gradguard.GradientBugError`` in tracebacks and reprs: the public name,
# not this private module's.
for _type in (GradguardError, GradientBugError, GradientBugWarning):
    _type.__module__ = "gradguard"
del _type
