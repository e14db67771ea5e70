"""GG106 orphan gradient: parameters that receive gradients but no optimizer holds.

Reported at the first optimizer step that finds such a gradient (a backward pass
reached a parameter that no optimizer holds, among the optimizers stepped or
cleared so far and, when that is not all of them, the live ones: a GAN's second
optimizer exists before its first step), as of that step; what is still unheld
when the watch ends and was not reported then is reported at the end. The
parameters are the models' (seen running) and, while the watch learns the
models, the ``nn.Parameter`` leaves of a backward pass's graph: a parameter kept
by an object that is no ``nn.Module`` is no model's, and no
``model.parameters()`` optimizer holds it. Tensors that are not ``nn.Parameter``
(an input that requires grad, for a saliency map or an adversarial example) are
read by the user's code and are not counted.
"""

from __future__ import annotations

from typing import Dict, List

from .._view import EndView, StepView, at, plural

CODE = "GG106"
#: The events this rule listens to (see the package's docstring), each with its place among that event's rules.
EVENTS = {"at_every_step": 40, "at_end": 20}


class State:
    """The parameters already judged unheld (by id), so that each is reported once and looked for once."""

    def __init__(self, clock=None):
        self.judged: set = set()
        # unheld at a step, not judged yet: id -> (parameter, line, step). An optimizer built later (one per
        # step, for one adapter's parameters) may still take and apply them; judged at the next step.
        self.pending: Dict[int, tuple] = {}


def _report(view, found, step) -> None:
    orphans: Dict[tuple, List] = {}
    for p, site in found:
        orphans.setdefault(site, []).append(p)
    for site, states in orphans.items():
        when = f" before {view.name}.step() (step {step})" if step is not None else ""
        view.report(
            CODE,
            f"{plural(len(states), 'parameter')} received gradients from the backward pass at {at(site, site)}"
            f"{when} but no optimizer holds them.",
            site, step, states,
        )


def at_every_step(view: StepView) -> None:
    """A parameter unheld at a step is reported at the next step (of any optimizer) that still finds it
    unheld, as of the first: by then another optimizer's step ran, and none took it. One held in between
    (an optimizer built for it after the other's step, as a trainer with one optimizer per adapter does)
    is dropped."""
    state: State = view.memory[CODE]
    found = view.orphans(state.judged)
    now = {id(p): (p, site) for p, site in found}
    confirmed = [(p, site, step) for i, (p, site, step) in state.pending.items() if i in now]
    done = {id(p) for p, _, _ in confirmed}
    state.pending = {i: (p, site, view.n) for i, (p, site) in now.items() if i not in done}
    if not confirmed:
        return
    state.judged.update(id(p) for p, _, _ in confirmed)
    by_step: Dict[int, list] = {}
    for p, site, step in confirmed:
        by_step.setdefault(step, []).append((p, site))
    for step, group in by_step.items():
        _report(view, group, step)


def at_end(view: EndView) -> None:
    if not view.opts:
        return  # no optimizer stepped: a loop that updates by hand, nothing to compare with
    state: State = view.memory[CODE]
    left = view.orphans()
    pending = {i: step for i, (p, site, step) in state.pending.items()}
    by_step: Dict[object, list] = {}
    for p, site in left:  # those found unheld at the last step, as of that step
        by_step.setdefault(pending.get(id(p)), []).append((p, site))
    for step, group in by_step.items():
        _report(view, group, step)
