"""The run-time rules, one module per code.

Each module names its ``CODE``, holds its own criteria and, where it needs one,
its own memory for one watch (a ``State`` class; the session keeps one instance
per watch in ``view.memory[CODE]`` and knows nothing of its contents). A rule
reads only views (``.._view``) through the functions it defines:

* ``at_every_step(view)``: a :class:`StepView`, every step, before anything else (even with no gradient);
* ``at_empty_step(view)``: a :class:`StepView`, a step while none of its parameters has a gradient;
* ``at_step(view)``: a :class:`StepView`, before the optimizer reads ``.grad`` (steps with a gradient);
* ``at_window(view, site, passes)``: one accumulation window of that step;
* ``at_pass(view)``: a :class:`PassView`, before a backward pass;
* ``at_discard(view)``: a :class:`DiscardView`, a pass's gradient cleared unused;
* ``after_graph_pass(ps, report, memory)``: a ``backward(create_graph=True)`` pass just ran;
* ``at_end(view)``: an :class:`EndView`, when the watch ends;
* ``at_clip(name, tensors, grads, site, step_of, report, memory)``: a clipping function is about to read gradients;

A module declares the ones it defines in ``EVENTS``, each with an order key
(``EVENTS = {"at_step": 40, "at_end": 10}``): an event runs its rules by that key, lowest
first, and the package builds the dispatch from it, so a rule defined is a rule run
(``tests/test_watch_rule_modules.py`` checks the two agree). ``State`` may follow the
watch's other events (``on_module``, ``before_pass``, ``before_clearing``, ``after_clearing``,
``after_step``, ``close``, ``after_scaled_pass``, ``unscaled``), in code order. The words of
every finding come from :mod:`gradguard.rules`; a rule adds only the specifics
(which step, which line, how many passes). Adding a rule: its module here (found by
name, ``ggNNN.py``: nothing lists the modules by hand), a ``ggXXX_bad.py``/``ggXXX_good.py`` pair in
``tests/watch_scripts/``, and its catalogue entry; ``python scripts/add_rule.py`` writes them as stubs
(docs/contributing.md, "Adding a rule").
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType
from typing import Callable, Dict, Tuple

#: The events a rule module may declare in ``EVENTS`` (and must then define a function of that name for).
EVENTS = ("at_every_step", "at_empty_step", "at_step", "at_window", "at_pass", "at_discard", "after_graph_pass",
          "at_clip", "at_end")


def _discover() -> Tuple[ModuleType, ...]:
    names = sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name[:2] == "gg" and m.name[2:5].isdigit())
    return tuple(importlib.import_module(f"{__name__}.{name}") for name in names)


#: code -> module, for every rule the watch can report.
MODULES = {m.CODE: m for m in _discover()}


def _handlers(event: str) -> Tuple[Callable, ...]:
    # Sorted by each module's order key: the order findings of one event come in (and the first
    # one "raise" mode raises), so it must not depend on file names.
    listening = [m for m in MODULES.values() if event in m.EVENTS]
    return tuple(getattr(m, event) for m in sorted(listening, key=lambda m: m.EVENTS[event]))


#: event -> the rule functions it runs, in order.
DISPATCH: Dict[str, Tuple[Callable, ...]] = {event: _handlers(event) for event in EVENTS}


def memory(clock: Callable[[], int]) -> Dict[str, object]:
    """A fresh memory for one watch: code -> that rule's ``State`` (``clock()``: the watch's event clock)."""
    return {m.CODE: m.State(clock) for m in MODULES.values() if hasattr(m, "State")}


def _each(memory: dict, event: str, *args) -> None:
    for state in memory.values():
        fn = getattr(state, event, None)
        if fn is not None:
            fn(*args)


def _run(event: str, *args) -> None:
    for rule in DISPATCH[event]:
        rule(*args)


def at_step(view) -> None:
    """Every step rule; a step with no gradient at all runs the ``at_empty_step`` rules instead."""
    _run("at_every_step", view)  # rules that only note that this optimizer's step was called
    if not view.has_grad:
        _run("at_empty_step", view)
        return
    _run("at_step", view)
    for site, group in view.windows():
        _run("at_window", view, site, group)


def at_pass(view) -> None:
    _run("at_pass", view)


def after_graph_pass(ps, report, memory: dict) -> None:
    """A ``backward(create_graph=True)`` pass ``ps`` has just put its gradient into ``.grad``."""
    _run("after_graph_pass", ps, report, memory)


def at_clip(name: str, tensors, grads: bool, site, step_of, report, memory: dict) -> None:
    _run("at_clip", name, tensors, grads, site, step_of, report, memory)


def after_scaled_pass(params, scaler, memory: dict) -> None:
    """A pass of a loss ``GradScaler.scale`` returned reached ``params``."""
    _each(memory, "after_scaled_pass", params, scaler)


def unscaled(params, memory: dict) -> None:
    _each(memory, "unscaled", params)


def at_discard(view) -> None:
    _run("at_discard", view)


def at_end(view) -> None:
    _run("at_end", view)


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
