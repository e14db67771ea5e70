"""A clip whose total norm overflowed zeroes the gradient: that is the clip's factor, not a clearing (GG102).

``clip_grad_norm_`` multiplies every gradient by ``max_norm / total_norm``; where the float32
total norm overflows to inf (finite gradients of 1e30: their squares do not fit), the factor is
0 and every buffer holds only zeros at the step. The watch read those zeros as a clearing by
hand and reported GG102 ("all of them were cleared ... before its first step") on a correct
loop (backward, clip, step: GradBench's VGRNN twin). The truth is torch's own: the clip returns
inf and leaves zeros. Forms: the clip inline, in a helper, in a trainer's method, and the two
halves (``get_total_norm`` then ``clip_grads_with_norm_``). Negative controls: a ``p.grad.zero_()``
by hand between backward and step, with or without a clip before it, is still GG102.
"""

import pytest
import torch

import gradguard as gg

STEPS = 3


def _data():
    return [torch.full((3, 4), 1e30) for _ in range(STEPS)]  # float32: finite gradients, an infinite norm


def inline(model, opt, data, zero_after):
    for x in data:
        opt.zero_grad()
        model(x).sum().backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if zero_after:
            for p in model.parameters():
                p.grad.zero_()
        opt.step()


def _clip(params, limit):
    return torch.nn.utils.clip_grad_norm_(params, limit)


def helper(model, opt, data, zero_after):
    for x in data:
        opt.zero_grad()
        model(x).sum().backward()
        _clip(list(model.parameters()), 1.0)
        if zero_after:
            torch._foreach_zero_([p.grad for p in model.parameters()])
        opt.step()


class Trainer:
    def __init__(self, net, optim, zero_after):
        self.net, self.optim, self.zero_after = net, optim, zero_after

    def update(self, batch):
        self.optim.zero_grad()
        self.net(batch).sum().backward()
        params = [p for p in self.net.parameters() if p.grad is not None]
        norm = torch.nn.utils.get_total_norm([p.grad for p in params])
        torch.nn.utils.clip_grads_with_norm_(params, 1.0, norm)
        if self.zero_after:
            for p in params:
                p.grad.mul_(0)
        self.optim.step()


def method(model, opt, data, zero_after):
    t = Trainer(model, opt, zero_after)
    for x in data:
        t.update(x)


FORMS = {"inline": inline, "helper": helper, "method": method}


def _run(form, zero_after):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2, bias=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gg.watch(mode="record") as w:
        FORMS[form](model, opt, _data(), zero_after)
    return [f.code for f in w.findings]


def test_the_reference_a_clip_of_an_overflowed_norm_leaves_zeros():
    model = torch.nn.Linear(4, 2, bias=False)
    model(_data()[0]).sum().backward()
    assert torch.isfinite(model.weight.grad).all() and model.weight.grad.abs().min() > 0
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    assert torch.isinf(norm)
    assert (model.weight.grad == 0).all()


@pytest.mark.parametrize("form", sorted(FORMS))
def test_zeros_left_by_a_clip_are_no_discarded_gradient(form):
    assert "GG102" not in _run(form, False), form


@pytest.mark.parametrize("form", sorted(FORMS))
def test_negative_control_zeroing_by_hand_after_the_clip_is_still_gg102(form):
    assert "GG102" in _run(form, True), form


def test_negative_control_zeroing_by_hand_without_a_clip_is_still_gg102():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2, bias=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gg.watch(mode="record") as w:
        for x in _data():
            opt.zero_grad()
            model(x / 1e30).sum().backward()
            for p in model.parameters():
                p.grad.zero_()
            opt.step()
    assert "GG102" in [f.code for f in w.findings]
