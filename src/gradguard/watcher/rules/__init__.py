"""The run-time rules, one module per code.

Each module names its ``CODE`` and reads only views (``.._view``): ``at_step``
(a :class:`StepView`, before the optimizer reads ``.grad``), ``at_window``
(one accumulation window of that step), ``at_pass`` (a :class:`PassView`,
before a backward pass) or ``at_end`` (an :class:`EndView`). GG102, a rule
about clearings, keeps its own memory of the clearing lines (``gg102.Lines``).
The words of every finding come from :mod:`gradguard.rules`; a rule adds only
the specifics (which step, which line, how many passes).
"""

from __future__ import annotations

from . import gg101, gg102, gg103, gg104, gg105, gg106, gg107, gg108, gg109, gg110

#: code -> module, for every rule the watch can report.
MODULES = {m.CODE: m for m in (gg101, gg102, gg103, gg104, gg105, gg106, gg107, gg108, gg109, gg110)}

# The order findings of one event come in (and the first one "raise" mode raises).
_STEP = (gg101, gg108, gg107)
_WINDOW = (gg109, gg104, gg105)
_END = (gg103, gg106, gg105)


def at_step(view) -> None:
    """Every step rule; a step with no gradient at all is GG110's alone (or GG102's)."""
    if not view.with_grad:
        gg110.at_step(view)
        return
    for rule in _STEP:
        rule.at_step(view)
    for site, group in view.windows():
        for rule in _WINDOW:
            rule.at_window(view, site, group)


def at_pass(view) -> None:
    gg101.at_pass(view)


def at_end(view) -> None:
    for rule in _END:
        rule.at_end(view)
