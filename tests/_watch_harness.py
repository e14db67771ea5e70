"""The watch tests' harness: run a training program with or without the watch, keeping what every step applied.

The float64 watch tests judge a finding by the numbers: the gradient each ``opt.step()`` applied, compared with
the window's mean computed independently. One harness for them all, so that the reading of "what a step applied"
is the same in every test.
"""

from __future__ import annotations

import gradguard as gg


def run_recording_steps(program, model, opt, *args, watch=True):
    """Run ``program(model, opt, *args)``, under ``gradguard.watch(mode="record")`` unless ``watch`` is false.

    Returns ``(findings, applied, weights)``: the watch's findings (None without the watch), and for every
    ``opt.step()``, in order, the gradients it applied and the weights it started from (clones, in the order of
    ``model.parameters()``)."""
    applied, weights = [], []
    own_step = opt.step

    def step(*a, **kw):
        applied.append([p.grad.clone() for p in model.parameters()])
        weights.append([p.detach().clone() for p in model.parameters()])
        return own_step(*a, **kw)

    opt.step = step
    if not watch:
        program(model, opt, *args)
        return None, applied, weights
    with gg.watch(mode="record") as w:
        program(model, opt, *args)
    return list(w.findings), applied, weights


def first_applied(applied):
    """The gradients the first step applied ([] if no step ran)."""
    return applied[0] if applied else []
