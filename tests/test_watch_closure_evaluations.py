"""GG101 inside one ``step(closure)``: a closure that does not clear sums its evaluations' gradients.

LBFGS calls its closure at each point it tries within one step, after moving the
parameters in place. Each evaluation must return the gradient at that point; a
closure without ``zero_grad()`` (temperature_scaling #20) adds it to every earlier
evaluation's, so the step works on a sum of gradients taken elsewhere. The watch
reads it from one model of ``.grad``: a step that moved the parameters since its
closure's last pass has applied what their buffers hold (as a step does), so the
next pass adding to it makes the buffer stale. It used to report GG104 (the
evaluations read as an undivided accumulation window).

Numbers in float64: the closure that clears matches the same fit without the
watch; the one that does not clear ends elsewhere (the bug is real).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import gradguard as gg


def _data():
    g = torch.Generator().manual_seed(0)
    logits = 3 * torch.randn(64, 5, generator=g, dtype=torch.float64)
    labels = torch.randint(0, 5, (64,), generator=g)
    return logits, labels


def _fit(clear: bool, watch: bool = True, line_search=None, as_method: bool = False):
    logits, labels = _data()
    temperature = torch.nn.Parameter(torch.full((1,), 1.5, dtype=torch.float64))
    opt = torch.optim.LBFGS([temperature], lr=0.01, max_iter=50, line_search_fn=line_search)

    def closure():
        if clear:
            opt.zero_grad()
        loss = F.cross_entropy(logits / temperature, labels)
        loss.backward()
        return loss

    class Fitter:  # the same closure written as a bound method calling a helper
        def nll(self):
            return F.cross_entropy(logits / temperature, labels)

        def evaluate(self):
            if clear:
                for p in [temperature]:
                    p.grad = None
            loss = self.nll()
            loss.backward()
            return loss

    fn = Fitter().evaluate if as_method else closure
    if not watch:
        opt.step(fn)
        return [], temperature.detach().clone()
    with gg.watch(mode="record") as w:
        opt.step(fn)
    return w.findings, temperature.detach().clone()


@pytest.mark.parametrize("as_method", [False, True], ids=["closure", "method"])
def test_a_closure_without_a_clear_sums_its_evaluations(as_method):
    findings, t_bug = _fit(clear=False, as_method=as_method)
    _, t_ref = _fit(clear=True, watch=False)
    assert not torch.allclose(t_bug, t_ref, rtol=1e-6)  # the bug changes the fit
    assert [f.code for f in findings] == ["GG101"]
    assert findings[0].step == 1
    assert "closure" in findings[0].message and "zero_grad()" in findings[0].message


@pytest.mark.parametrize("line_search", [None, "strong_wolfe"])
@pytest.mark.parametrize("as_method", [False, True], ids=["closure", "method"])
def test_a_closure_that_clears_is_silent_and_the_watch_changes_nothing(line_search, as_method):
    findings, t = _fit(clear=True, line_search=line_search, as_method=as_method)
    _, t_ref = _fit(clear=True, watch=False, line_search=line_search)
    assert torch.equal(t, t_ref)
    assert findings == []


def test_one_evaluation_per_step_that_clears_is_silent():
    # step(closure) of an optimizer that evaluates it once (SGD, Lightning's automatic optimization)
    torch.manual_seed(0)
    net = torch.nn.Linear(4, 2).double()
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    x, y = torch.randn(8, 4, dtype=torch.float64), torch.randn(8, 2, dtype=torch.float64)

    def closure():
        opt.zero_grad()
        loss = F.mse_loss(net(x), y)
        loss.backward()
        return loss

    with gg.watch(mode="record") as w:
        for _ in range(4):
            opt.step(closure)
    assert w.findings == []


def test_a_closure_without_a_clear_across_steps_is_stale_too():
    # Negative control of the wording: one evaluation per step, never cleared: the next step's gradient
    # holds the last one's (the plain missing clear, seen through the closure).
    torch.manual_seed(0)
    net = torch.nn.Linear(4, 2).double()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    x, y = torch.randn(8, 4, dtype=torch.float64), torch.randn(8, 2, dtype=torch.float64)

    def closure():
        loss = F.mse_loss(net(x), y)
        loss.backward()
        return loss

    with gg.watch(mode="record") as w:
        for _ in range(3):
            opt.step(closure)
    assert [f.code for f in w.findings] == ["GG101"]
    assert w.findings[0].step == 2
