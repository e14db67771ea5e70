"""GG101 stale gradient: a step (or a hand-written update) reuses gradient already applied."""

from __future__ import annotations

from typing import List

import torch

from .._view import PassView, StepView, at, plural

CODE = "GG101"
#: The events this rule listens to (see the package's docstring), each with its place among that event's rules.
EVENTS = {"at_step": 10, "at_pass": 10}


class State:
    """The optimizers that stepped in this watch, to tell a parameter held by two of them."""

    def __init__(self, clock=None):
        self.opts: dict = {}
        self.applied: dict = {}  # id of an optimizer's state -> the backward passes its last step applied

        self.listed_twice: set = set()  # ids of the optimizer states already reported for a parameter listed twice

    def after_step(self, ost, passes, by_hand) -> None:
        self.opts[id(ost)] = ost
        self.applied[id(ost)] = set(passes)


def at_step(view: StepView) -> None:
    memory = view.memory[CODE]
    if len(view.ost.ids) < len(view.ost.params) and id(view.ost) not in memory.listed_twice:
        # A parameter listed twice in one group (`list(actor.parameters()) + list(critic.parameters())` over a
        # shared trunk): torch updates each entry, so every step applies its gradient twice (one shared state).
        memory.listed_twice.add(id(view.ost))
        seen, twice = set(), []
        for p in view.ost.params:
            if id(p) in seen and p.grad is not None and all(q is not p for q in twice):
                twice.append(p)
            seen.add(id(p))
        if twice:
            view.report(
                CODE,
                f"{view.name}.step() (step {view.n}) applied the .grad of {plural(len(twice), 'parameter')} listed "
                "twice in its parameter groups: it updates each of them twice per step with the same gradient.",
                view.site, view.n, twice,
                "Build the optimizer on each parameter once: list(dict.fromkeys(params)) or a set union of the "
                "modules' parameters (the modules share parameters).",
            )
    if view.stale:
        stale = set(map(id, view.stale))
        memory = view.memory[CODE]
        other = next((o for o in memory.opts.values() if o is not view.ost and not stale.isdisjoint(o.ids)), None)
        # a backward pass made after the other optimizer's step (alternating losses: `l1.backward(); o1.step();
        # l2.backward(); o2.step()`) is a second loss meant for the shared parameters: clearing after the first
        # step is the fix (the plain stale-gradient finding below), not taking them out of an optimizer
        if other is not None and set(view.passes) - memory.applied.get(id(other), set()):
            other = None
        if other is not None:
            # Not a missing zero_grad: the same parameters sit in two optimizers, and the other one applied
            # this gradient already (clearing right after the first step would do the same as one optimizer).
            shared = [p for p in view.stale if id(p) in other.ids]
            view.report(
                CODE,
                f"{view.name}.step() (step {view.n}) applied the .grad of {plural(len(shared), 'parameter')} that "
                f"another optimizer ({other.name}) holds too and already stepped with the same gradient: they sit in two "
                "optimizers, so each iteration moves them twice.",
                view.site, view.n, shared,
                "Give each parameter one optimizer: leave the shared module out of one of them (or build one "
                "optimizer with a parameter group per learning rate); clearing the first optimizer's gradients right "
                "after its step has the same effect (only it then moves them).",
            )
            return
        if view.ost.closure:
            # step(closure): the step evaluates its closure (LBFGS: at each point it tries), and each
            # evaluation's gradient must be the gradient there, not a sum with the evaluations before
            view.report(
                CODE,
                f"{view.name}.step() (step {view.n}) used the .grad of {plural(len(view.stale), 'parameter')} still "
                "holding gradient of an earlier evaluation of its closure, taken where the parameters were before "
                "the optimizer moved them: each evaluation added its gradient to the ones before.",
                view.site, view.n, view.stale,
                "Clear the gradients at the top of the closure: optimizer.zero_grad() before its loss.backward().",
            )
            return
        view.report(
            CODE,
            f"{view.name}.step() (step {view.n}) used the .grad of {plural(len(view.stale), 'parameter')} still holding "
            "gradient that an earlier step had already applied.",
            view.site, view.n, view.stale,
        )


def at_pass(view: PassView) -> None:
    # A parameter no optimizer holds, changed in place since the last pass reached it while
    # its .grad was neither cleared nor stepped: an update by hand (p -= lr * p.grad), and
    # this pass adds to the gradient that update already applied. Unless the .grad was
    # zeroed by hand after the update (p.grad.zero_()): that is a clearing.
    stale = _not_zeroed(view.stale)
    if stale:
        view.report(
            CODE,
            f"The backward pass at {at(view.site, view.site)} added gradient to the .grad of "
            f"{plural(len(stale), 'parameter')} that were updated in place since the previous backward pass "
            "(an update by hand) without clearing .grad, so it still holds the gradient already applied.",
            view.site, None, stale,
        )


def _not_zeroed(params: List[torch.Tensor]) -> List[torch.Tensor]:
    """Those of ``params`` whose ``.grad`` is not all zeros (one foreach max-norm, one sync; only in loops
    that update parameters by hand)."""
    if not params:
        return []
    grads = [p.grad for p in params]
    try:
        norms = torch._foreach_norm(grads, float("inf"))
        device = norms[0].device
        nonzero = (torch.stack([n.to(device=device, dtype=torch.float32) for n in norms]) != 0).tolist()
    except Exception:
        return params
    return [p for p, nz in zip(params, nonzero) if nz]
