"""GG111 for windows averaged on their gradients (``p.grad /= K`` before the step): the final partial
window divided by the full K is K'/K of its mean, as with ``loss / K``.

The watch weighs each pass by its loss's factor times the factor by which ``.grad`` was rescaled
before the step, so the short window shows like a divided loss's. Truth in float64 (plain PyTorch:
the last window's mean gradient at its weights). Forms: the remainder closed by the step condition,
a remainder step after the loop (in a helper), a trainer's method. Twin: the remainder divided by
its own size K' (correct), clean; the fixed-K windows alone draw no GG104.
"""

import pytest
import torch

from _watch_harness import run_recording_steps

K = 4
N = 10  # two windows of 4, a remainder of 2


def _data():
    g = torch.Generator().manual_seed(7)
    return [(torch.randn(3, 6, generator=g, dtype=torch.float64), torch.randn(3, 3, generator=g, dtype=torch.float64))
            for _ in range(N)]


def _loss(m, x, y):
    return ((m(x) - y) ** 2).sum(dim=1).mean()


def _divide(model, by):
    for p in model.parameters():
        if p.grad is not None:
            p.grad /= by


def condition_form(model, opt, data, own):
    for i, (x, y) in enumerate(data):
        _loss(model, x, y).backward()
        if (i + 1) % K == 0 or i + 1 == len(data):
            _divide(model, (i % K + 1) if own else K)
            opt.step()
            opt.zero_grad()


def after_loop_form(model, opt, data, own):
    for i, (x, y) in enumerate(data):
        _loss(model, x, y).backward()
        if (i + 1) % K == 0:
            _divide(model, K)
            opt.step()
            opt.zero_grad()
    if len(data) % K:
        _divide(model, len(data) % K if own else K)
        opt.step()
        opt.zero_grad()


class Fit:
    def __init__(self, net, o, own):
        self.net, self.o, self.own = net, o, own

    def flush(self, n):
        torch._foreach_div_([q.grad for q in self.net.parameters()], n)
        self.o.step()
        self.o.zero_grad()

    def __call__(self, batches):
        c = 0
        for a, b in batches:
            _loss(self.net, a, b).backward()
            c += 1
            if c == K:
                self.flush(K)
                c = 0
        if c:
            self.flush(c if self.own else K)


def method_form(model, opt, data, own):
    Fit(model, opt, own)(data)


FORMS = {"condition": condition_form, "after_loop": after_loop_form, "method": method_form}


def _run(form, own, watch=True):
    torch.manual_seed(0)
    model = torch.nn.Linear(6, 3).double()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    findings, applied, weights = run_recording_steps(FORMS[form], model, opt, _data(), own, watch=watch)
    return (None if findings is None else [(f.code, f.step) for f in findings]), applied, weights


def _last_window_mean(weights):
    model = torch.nn.Linear(6, 3).double()
    with torch.no_grad():
        for p, w in zip(model.parameters(), weights):
            p.copy_(w)
    rest = _data()[2 * K:]
    _loss(model, torch.cat([x for x, _ in rest]), torch.cat([y for _, y in rest])).backward()
    return [p.grad for p in model.parameters()]


@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_remainder_divided_by_the_full_k_on_its_gradients_is_gg111(form):
    _, applied, weights = _run(form, False, watch=False)
    for a, m in zip(applied[2], _last_window_mean(weights[2])):  # the truth: 2/4 of its mean
        torch.testing.assert_close(a, m / 2)
    found, _, _ = _run(form, False)
    assert found == [("GG111", 3)], form


@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_remainder_divided_by_its_own_size_is_clean(form):
    _, applied, weights = _run(form, True, watch=False)
    for a, m in zip(applied[2], _last_window_mean(weights[2])):  # negative control: the mean
        torch.testing.assert_close(a, m)
    found, _, _ = _run(form, True)
    assert found == [], form
