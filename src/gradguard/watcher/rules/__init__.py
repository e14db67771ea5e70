"""The run-time rules, one module per code.

Each module names its ``CODE``, holds its own criteria and, where it needs one,
its own memory for one watch (a ``State`` class; the session keeps one instance
per watch in ``view.memory[CODE]`` and knows nothing of its contents). A rule
reads only views (``.._view``) through the functions it defines:

* ``at_step(view)``: a :class:`StepView`, before the optimizer reads ``.grad``;
* ``at_window(view, site, passes)``: one accumulation window of that step;
* ``at_pass(view)``: a :class:`PassView`, before a backward pass;
* ``at_discard(view)``: a :class:`DiscardView`, a pass's gradient cleared unused;
* ``after_graph_pass(ps, report, memory)``: a ``backward(create_graph=True)`` pass just ran;
* ``at_end(view)``: an :class:`EndView`, when the watch ends;
* ``at_clip(name, tensors, grads, site, step_of, report, memory)``: a clipping function is about to read gradients;

and ``State`` may follow the watch's other events (``on_module``, ``before_pass``,
``before_clearing``, ``after_clearing``, ``after_step``, ``close``). The words of
every finding come from :mod:`gradguard.rules`; a rule adds only the specifics
(which step, which line, how many passes). Adding a rule: its module here, its
entry in ``MODULES``, a ``ggXXX_bad.py``/``ggXXX_good.py`` pair in
``tests/watch_scripts/``, and its catalogue entry.
"""

from __future__ import annotations

from typing import Callable, Dict

from . import gg101, gg102, gg103, gg104, gg105, gg106, gg107, gg108, gg109, gg110, gg111, gg112, gg113, gg114

#: code -> module, for every rule the watch can report.
MODULES = {m.CODE: m for m in (gg101, gg102, gg103, gg104, gg105, gg106, gg107, gg108, gg109, gg110, gg111,
                                gg112, gg113, gg114)}

# The order findings of one event come in (and the first one "raise" mode raises).
_STEP = (gg101, gg108, gg107, gg111, gg102, gg114)
_WINDOW = (gg109, gg104, gg105, gg113)
_END = (gg103, gg106, gg105, gg108)


def memory(clock: Callable[[], int]) -> Dict[str, object]:
    """A fresh memory for one watch: code -> that rule's ``State`` (``clock()``: the watch's event clock)."""
    return {m.CODE: m.State(clock) for m in MODULES.values() if hasattr(m, "State")}


def _each(memory: dict, event: str, *args) -> None:
    for state in memory.values():
        fn = getattr(state, event, None)
        if fn is not None:
            fn(*args)


def at_step(view) -> None:
    """Every step rule; a step with no gradient at all is GG110's alone (or GG102's)."""
    gg103.at_step(view)  # only notes that this optimizer's step was called
    if not view.has_grad:
        if view.discarded:
            gg102.at_empty_step(view)
        gg110.at_step(view)
        return
    for rule in _STEP:
        rule.at_step(view)
    for site, group in view.windows():
        for rule in _WINDOW:
            rule.at_window(view, site, group)


def at_pass(view) -> None:
    gg101.at_pass(view)


def after_graph_pass(ps, report, memory: dict) -> None:
    """A ``backward(create_graph=True)`` pass ``ps`` has just put its gradient into ``.grad``."""
    gg108.after_graph_pass(ps, report, memory)


def at_clip(name: str, tensors, grads: bool, site, step_of, report, memory: dict) -> None:
    gg112.at_clip(name, tensors, grads, site, step_of, report, memory)


def after_scaled_pass(params, scaler, memory: dict) -> None:
    """A pass of a loss ``GradScaler.scale`` returned reached ``params``."""
    memory[gg112.CODE].after_scaled_pass(params, scaler)


def unscaled(params, memory: dict) -> None:
    memory[gg112.CODE].unscaled(params)


def at_discard(view) -> None:
    gg102.at_discard(view)


def at_end(view) -> None:
    for rule in _END:
        rule.at_end(view)


def on_module(view) -> None:
    _each(view.memory, "on_module", view.module)


def before_pass(ps, memory: dict) -> None:
    _each(memory, "before_pass", ps)


def before_clearing(view) -> None:
    _each(view.memory, "before_clearing", view)


def after_clearing(memory: dict) -> None:
    _each(memory, "after_clearing")


def after_step(ost, passes: dict, by_hand: bool, memory: dict) -> None:
    _each(memory, "after_step", ost, passes, by_hand)


def close(memory: dict) -> None:
    _each(memory, "close")
