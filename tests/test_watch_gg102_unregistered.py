"""GG102 when the optimizer is first seen at its first step: clearings before it count too.

A loop that clears with ``model.zero_grad()`` (the optimizer's own ``zero_grad`` never runs) is seen
by the watch only from the optimizer's first step on; the passes its clearing threw away before then
were left unjudged, so with three windows the clearing showed in two intervals only and was never
reported. Truth in float64 without the watch: each step applies only the last micro-batch's gradient,
not the window's mean. Forms: inline, a helper, a method with other names. Twin: the same clearing at
the window's start (correct).
"""

import pytest
import torch

from _watch_harness import run_recording_steps, first_applied

K = 2


def _data(n=6):
    g = torch.Generator().manual_seed(2)
    return [(torch.randn(3, 6, generator=g, dtype=torch.float64), torch.randn(3, 3, generator=g, dtype=torch.float64))
            for _ in range(n)]


def _loss(m, x, y, every=True):
    # The buggy loop leaves its losses undivided (divided by K, the discards would show as a window by
    # intent, GG102's rule (d), at once); the fixed twin clears at the window's start and divides.
    return ((m(x) - y) ** 2).sum(dim=1).mean() / (1 if every else K)


def inline_form(model, opt, data, every):
    for i, (x, y) in enumerate(data):
        if every or i % K == 0:
            model.zero_grad()
        _loss(model, x, y, every).backward()
        if (i + 1) % K == 0:
            opt.step()


def _clear(net):
    net.zero_grad()


def helper_form(model, opt, data, every):
    c = 0
    for x, y in data:
        if every or c == 0:
            _clear(model)
        _loss(model, x, y, every).backward()
        c += 1
        if c == K:
            opt.step()
            c = 0


class T:
    def __init__(self, n, o, every):
        self.n, self.o, self.every = n, o, every

    def run(self, d):
        for j, (a, b) in enumerate(d):
            if self.every or j % K == 0:
                self.n.zero_grad()
            _loss(self.n, a, b, self.every).backward()
            if j % K == K - 1:
                self.o.step()


def method_form(model, opt, data, every):
    T(model, opt, every).run(data)


FORMS = {"inline": inline_form, "helper": helper_form, "method": method_form}


def _run(form, every, watch=True):
    torch.manual_seed(0)
    model = torch.nn.Linear(6, 3).double()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    findings, applied, _ = run_recording_steps(FORMS[form], model, opt, _data(), every, watch=watch)
    return (None if findings is None else sorted({f.code for f in findings})), first_applied(applied)


def _window_mean():
    torch.manual_seed(0)
    model = torch.nn.Linear(6, 3).double()
    x = torch.cat([b[0] for b in _data()[:K]])
    y = torch.cat([b[1] for b in _data()[:K]])
    _loss(model, x, y).backward()  # equal micro-batches: the full batch's mean is the window's
    return [p.grad for p in model.parameters()]


@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_module_clearing_before_every_micro_batch_is_gg102(form):
    _, first = _run(form, True, watch=False)
    mean = _window_mean()
    assert not all(torch.allclose(a, m) for a, m in zip(first, mean))  # the truth: neither the mean
    assert not all(torch.allclose(a, 2 * m) for a, m in zip(first, mean))  # nor the window's sum
    assert _run(form, True)[0] == ["GG102"], form


@pytest.mark.parametrize("form", sorted(FORMS))
def test_the_clearing_at_the_window_start_is_clean(form):
    _, first = _run(form, False, watch=False)
    assert all(torch.allclose(a, m) for a, m in zip(first, _window_mean()))  # negative control
    assert _run(form, False)[0] == [], form
