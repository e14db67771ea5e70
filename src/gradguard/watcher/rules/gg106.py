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
    state: State = view.memory[CODE]
    found = view.orphans(state.judged)
    if not found:
        return
    state.judged.update(id(p) for p, _ in found)
    _report(view, found, view.n)


def at_end(view: EndView) -> None:
    if not view.opts:
        return  # no optimizer stepped: a loop that updates by hand, nothing to compare with
    _report(view, view.orphans(), None)
