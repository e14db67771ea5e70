"""GG113 in hand-written loops: every micro-batch scaled down twice, on the loss or on the gradients.

``loss / K / K``, ``loss / K`` then ``p.grad /= K`` before the step, or an undivided loss whose
gradients are divided by K twice: each step applies 1/K of its window's mean gradient. The watch
weighs each pass by what it reads, the factor in the loss's autograd graph times the factor by
which the waiting ``.grad`` was rescaled before the step, never by a name. Truth in float64 from
plain PyTorch (the full-batch mean of the first window); each program in three forms (inline, a
helper, a trainer's method with other names). Twins divided once (on the loss or on the
gradients) are clean; a clip that rescales ``.grad`` by an unrelated factor is no double division.
"""

import pytest
import torch
import torch.nn.functional as F

from _watch_harness import run_recording_steps, first_applied


def _model():
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 2)).double()


def _data(n):
    g = torch.Generator().manual_seed(4)
    return [(torch.randn(3, 5, generator=g, dtype=torch.float64), torch.randn(3, 2, generator=g, dtype=torch.float64))
            for _ in range(n)]


# how: (divisions of the loss, divisions of the gradients before the step, clip)
HOW = {
    "loss_twice": (2, 0, False),
    "loss_then_grad": (1, 1, False),
    "grad_twice": (0, 2, False),
    "loss_once": (1, 0, False),  # twin
    "grad_once": (0, 1, False),  # twin
    "loss_once_clipped": (1, 0, True),  # twin: clipping rescales .grad by a factor unrelated to K
}
TWICE = ("loss_twice", "loss_then_grad", "grad_twice")


def inline_form(model, opt, data, k, how):
    on_loss, on_grad, clip = how
    for i, (x, y) in enumerate(data):
        loss = F.mse_loss(model(x), y)
        for _ in range(on_loss):
            loss = loss / k
        loss.backward()
        if (i + 1) % k == 0:
            for _ in range(on_grad):
                for p in model.parameters():
                    p.grad /= k
            if clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1e-3)
            opt.step()
            opt.zero_grad()


def _scaled(value, by, times):
    for _ in range(times):
        value = value / by
    return value


def _average(params, by):
    for q in params:
        if q.grad is not None:
            q.grad.div_(by)


def helper_form(model, opt, data, k, how):
    on_loss, on_grad, clip = how
    for i, (x, y) in enumerate(data):
        _scaled(F.mse_loss(model(x), y), k, on_loss).backward()
        if (i + 1) % k == 0:
            for _ in range(on_grad):
                _average(model.parameters(), k)
            if clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1e-3)
            opt.step()
            opt.zero_grad()


class Learner:
    def __init__(self, net, o, every, how):
        self.net, self.o, self.every, self.how = net, o, every, how

    def update(self):
        for _ in range(self.how[1]):
            torch._foreach_div_([w.grad for w in self.net.parameters()], self.every)
        if self.how[2]:
            torch.nn.utils.clip_grad_norm_(self.net.parameters(), 1e-3)
        self.o.step()
        self.o.zero_grad()

    def run(self, batches):
        n = 0
        for a, b in batches:
            err = F.mse_loss(self.net(a), b)
            if self.how[0]:
                err = err * (1.0 / self.every ** self.how[0])
            err.backward()
            n += 1
            if n == self.every:
                self.update()
                n = 0


def method_form(model, opt, data, k, how):
    Learner(model, opt, k, how).run(data)


FORMS = {"inline": inline_form, "helper": helper_form, "method": method_form}


def _run(form, how, k, watch=True):
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = _data(3 * k)
    findings, applied, _ = run_recording_steps(FORMS[form], model, opt, data, k, HOW[how], watch=watch)
    return (None if findings is None else [(f.code, f.step) for f in findings]), first_applied(applied)


def _mean(k):
    model = _model()
    data = _data(k)
    F.mse_loss(model(torch.cat([x for x, _ in data])), torch.cat([y for _, y in data])).backward()
    return [p.grad for p in model.parameters()]


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("how", TWICE)
@pytest.mark.parametrize("k", [2, 4])
def test_every_window_divided_twice_is_gg113_at_step_1(form, how, k):
    _, applied = _run(form, how, k, watch=False)
    for a, m in zip(applied, _mean(k)):  # the truth: 1/K of the window's mean
        torch.testing.assert_close(a, m / k)
    found, _ = _run(form, how, k)
    assert found == [("GG113", 1)], (form, how, k)


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("how", ["loss_once", "grad_once"])
@pytest.mark.parametrize("k", [2, 4])
def test_a_window_divided_once_is_clean(form, how, k):
    _, applied = _run(form, how, k, watch=False)
    for a, m in zip(applied, _mean(k)):  # negative control of the truth: the mean itself
        torch.testing.assert_close(a, m)
    found, _ = _run(form, how, k)
    assert found == [], (form, how, k)


@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_clip_is_not_a_second_division(form):
    found, _ = _run(form, "loss_once_clipped", 4)
    assert found == [], form
