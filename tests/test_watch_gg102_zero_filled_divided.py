"""GG102 when the cleared buffers are divided before the step: a zero-filled ``.grad`` stays zero.

``optimizer.zero_grad(set_to_none=False)`` (or ``p.grad.zero_()``) between backward and step, then the
window averaged on its gradients (``p.grad /= K``) and the step: the division changes the zero-filled
buffers in place, and the watch took that for gradient written there by hand (moved into ``.grad``
from a buffer of one's own, which makes a clearing deliberate), so the discard was never reported.
A zero-filled buffer changed in place before any pass reached it is read once (one max-norm): still
zero, it is still cleared. Truth in float64 without the watch: every step applies a zero gradient, and
the weights never move. Forms: the clearing just before the step (helpers), ``model.zero_grad(set_to_none=False)``
right after every backward pass (inline), in a trainer's method. Twins: the same clearing after the step (correct); a gradient
moved by hand into the zero-filled buffers (an Opacus-style virtual step, correct): both clean.
"""

import pytest
import torch

from _watch_harness import run_recording_steps

K = 2
N = 6


def _data():
    g = torch.Generator().manual_seed(3)
    return [(torch.randn(3, 6, generator=g, dtype=torch.float64), torch.randn(3, 3, generator=g, dtype=torch.float64))
            for _ in range(N)]


def _loss(m, x, y):
    return ((m(x) - y) ** 2).sum(dim=1).mean()


def _divide(model, by):
    for p in model.parameters():
        if p.grad is not None:
            p.grad /= by


def _clear(opt):
    opt.zero_grad(set_to_none=False)


def before_step_form(model, opt, data, bad):
    for i, (x, y) in enumerate(data):
        _loss(model, x, y).backward()
        if (i + 1) % K == 0:
            if bad:
                _clear(opt)
            _divide(model, K)
            opt.step()
            if not bad:
                _clear(opt)


def after_backward_form(model, opt, data, bad):
    for i, (x, y) in enumerate(data):
        _loss(model, x, y).backward()
        if bad:
            model.zero_grad(set_to_none=False)
        if i % K == K - 1:
            for p in model.parameters():
                if p.grad is not None:
                    p.grad /= K
            opt.step()
            if not bad:
                model.zero_grad(set_to_none=False)


class Loop:
    def __init__(self, net, o, bad):
        self.net, self.o, self.bad = net, o, bad

    def update(self):
        torch._foreach_div_([q.grad for q in self.net.parameters()], K)
        self.o.step()

    def fit(self, batches):
        c = 0
        for a, b in batches:
            _loss(self.net, a, b).backward()
            c += 1
            if c == K:
                if self.bad:
                    self.o.zero_grad(False)
                self.update()
                if not self.bad:
                    self.o.zero_grad(False)
                c = 0


def method_form(model, opt, data, bad):
    Loop(model, opt, bad).fit(data)


def by_hand_form(model, opt, data, bad):
    """The twin that writes gradient into the cleared buffers: moved aside after every pass, back at the step."""
    saved = [torch.zeros_like(p) for p in model.parameters()]
    for i, (x, y) in enumerate(data):
        _loss(model, x, y).backward()
        for s, p in zip(saved, model.parameters()):
            s.add_(p.grad)
        opt.zero_grad(set_to_none=False)
        if (i + 1) % K == 0:
            for s, p in zip(saved, model.parameters()):
                p.grad.copy_(s)
                s.zero_()
            _divide(model, K)
            opt.step()
            opt.zero_grad(set_to_none=False)


FORMS = {"before_step": before_step_form, "after_backward": after_backward_form, "method": method_form}


def _run(form, bad, watch=True):
    torch.manual_seed(0)
    model = torch.nn.Linear(6, 3).double()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    fn = by_hand_form if form == "by_hand" else FORMS[form]
    findings, applied, weights = run_recording_steps(fn, model, opt, _data(), bad, watch=watch)
    return (None if findings is None else sorted({f.code for f in findings})), applied, weights


def _window_mean(weights, window):
    model = torch.nn.Linear(6, 3).double()
    with torch.no_grad():
        for p, w in zip(model.parameters(), weights):
            p.copy_(w)
    rows = _data()[window * K:(window + 1) * K]
    _loss(model, torch.cat([x for x, _ in rows]), torch.cat([y for _, y in rows])).backward()
    return [p.grad for p in model.parameters()]


@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_clearing_before_the_divided_step_is_gg102(form):
    _, applied, weights = _run(form, True, watch=False)
    assert len(applied) == N // K
    for n, step in enumerate(applied):  # the truth: nothing applied, though the window's mean is not zero
        assert all(not a.any() for a in step)
        assert any(m.abs().max() > 1e-3 for m in _window_mean(weights[n], n))
    found, _, _ = _run(form, True)
    assert "GG102" in found, form
    assert set(found) <= {"GG102", "GG110"}, found  # a step with no gradient may be named GG110 too


@pytest.mark.parametrize("form", sorted(FORMS) + ["by_hand"])
def test_the_correct_twins_are_clean(form):
    _, applied, weights = _run(form, False, watch=False)
    for n, step in enumerate(applied):  # negative control: every step applies its window's mean
        for a, m in zip(step, _window_mean(weights[n], n)):
            torch.testing.assert_close(a, m)
    found, _, _ = _run(form, False)
    assert found == [], form
