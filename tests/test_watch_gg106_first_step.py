"""GG106 at the first step: a parameter that receives gradient and that no optimizer holds is reported as of the
first optimizer step after which that gradient exists, not only when the watch ends.

Also a parameter kept by an object that is no ``nn.Module`` (its class forgot the base class): no
``model.parameters()`` holds it, and the watch finds it in the backward pass's graph. Each bad program is
checked against plain PyTorch in float64 (the orphan never moves and its ``.grad`` is the sum of every step's
gradient), beside negative controls: the fixed program, a GAN whose second optimizer has not stepped yet when
the first one steps, and an input that requires grad.
"""

import pytest
import torch
import torch.nn.functional as F

import gradguard as gg


class Plain:  # a class that forgot nn.Module: its parameter is no module's
    def __init__(self, n_in, n_out):
        self.weight = torch.nn.Parameter(0.1 * torch.randn(n_out, n_in, dtype=torch.float64))

    def __call__(self, h):
        return F.linear(h, self.weight)


class Head(torch.nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = torch.nn.Parameter(0.1 * torch.randn(n_out, n_in, dtype=torch.float64))

    def forward(self, h):
        return F.linear(h, self.weight)


class LM(torch.nn.Module):
    def __init__(self, head_class):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh()).double()
        self.head = head_class(8, 3)

    def forward(self, x):
        return self.head(self.body(x))


def _data(steps=4):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(5, 6, generator=g, dtype=torch.float64), torch.randint(0, 3, (5,), generator=g))
            for _ in range(steps)]


def _train(model, opt, data):
    for x, y in data:
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()


def test_a_parameter_of_no_module_is_reported_at_step_1():
    torch.manual_seed(0)
    model = LM(Plain)
    head0 = model.head.weight.detach().clone()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = _data()
    # independent reference: the same program without the watch, the head's gradient of each step summed
    torch.manual_seed(0)
    ref = LM(Plain)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    per_step = []
    for x, y in data:
        ref_opt.zero_grad()
        ref.head.weight.grad = None
        F.cross_entropy(ref(x), y).backward()
        per_step.append(ref.head.weight.grad.clone())
        ref_opt.step()
    with gg.watch(mode="record") as w:
        _train(model, opt, data)
    found = [f for f in w.findings if f.code == "GG106"]
    assert len(found) == 1 and found[0].step == 1, w.findings
    assert found[0].params == ("<tensor (3, 8)>",)
    # the finding is true: the head never moved, and its .grad holds every step's gradient
    assert torch.equal(model.head.weight.detach(), head0)
    torch.testing.assert_close(model.head.weight.grad, torch.stack(per_step).sum(0))
    assert not torch.allclose(model.head.weight.grad, per_step[-1])


def test_the_module_version_is_silent():
    # Negative control: the same program with the head an nn.Module: model.parameters() holds it
    torch.manual_seed(0)
    model = LM(Head)
    head0 = model.head.weight.detach().clone()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gg.watch(mode="record") as w:
        _train(model, opt, _data())
    assert w.findings == []
    assert not torch.equal(model.head.weight.detach(), head0)


@pytest.mark.parametrize("forward_first", [False, True])
def test_a_module_left_out_of_the_optimizer_is_reported_at_step_1(forward_first):
    # forward_first: the forward runs before zero_grad (the models are learned only after it); the
    # parameters are named all the same
    torch.manual_seed(0)
    model = LM(Head)
    opt = torch.optim.SGD(model.body.parameters(), lr=0.1)
    with gg.watch(mode="record") as w:
        for x, y in _data():
            if forward_first:
                loss = F.cross_entropy(model(x), y)
                opt.zero_grad()
            else:
                opt.zero_grad()
                loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
    assert [(f.code, f.step) for f in w.findings] == [("GG106", 1)]
    assert w.findings[0].params == ("head.weight",)


def test_a_parameter_replaced_after_the_optimizer_was_built_is_reported_at_step_1():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)).double()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    old = model[2].weight
    model[2].weight = torch.nn.Parameter(old.detach().clone())  # the optimizer keeps stepping the old tensor
    with gg.watch(mode="record") as w:
        _train(model, opt, _data())
    assert [(f.code, f.step) for f in w.findings] == [("GG106", 1)]
    assert w.findings[0].params == ("2.weight",)
    assert torch.equal(model[2].weight.detach(), old.detach())  # true: the weight in use never moved


def test_a_gan_whose_second_optimizer_has_not_stepped_yet_is_silent():
    # Negative control: the generator's loss fills the discriminator's .grad before the discriminator's
    # optimizer ever stepped or cleared; that optimizer exists, holds them, and clears them before its step
    torch.manual_seed(0)
    G = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh()).double()
    D = torch.nn.Sequential(torch.nn.Linear(6, 1)).double()
    opt_g = torch.optim.SGD(G.parameters(), lr=0.1)
    opt_d = torch.optim.SGD(D.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(2)
    with gg.watch(mode="record") as w:
        for _ in range(3):
            z = torch.randn(5, 4, generator=g, dtype=torch.float64)
            real = torch.randn(5, 6, generator=g, dtype=torch.float64)
            fake = G(z)
            opt_g.zero_grad()
            (-D(fake).mean()).backward()
            opt_g.step()
            opt_d.zero_grad()
            (D(fake.detach()).mean() - D(real).mean()).backward()
            opt_d.step()
    assert w.findings == []


def test_an_input_that_requires_grad_is_not_an_orphan():
    # Negative control: a tensor that is no nn.Parameter (an input whose gradient the program reads)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 3)).double()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gg.watch(mode="record") as w:
        for x, y in _data():
            x.requires_grad_(True)
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            saliency = x.grad.abs().sum()
            opt.step()
    assert saliency > 0 and w.findings == []


def test_raise_mode_stops_at_the_first_step():
    # the finding names step 1 and comes at the next step, which finds the parameter still unheld (an optimizer
    # built after step 1 could still have taken it), so "raise" stops the program there (before: only when the
    # watch ended)
    torch.manual_seed(0)
    model = LM(Head)
    opt = torch.optim.SGD(model.body.parameters(), lr=0.1)
    steps = []
    with pytest.raises(gg.GradientBugError) as err:
        with gg.watch(mode="raise"):
            for x, y in _data():
                opt.zero_grad()
                F.cross_entropy(model(x), y).backward()
                steps.append(len(steps) + 1)
                opt.step()
    assert err.value.args and "GG106" in str(err.value) and "(step 1)" in str(err.value) and steps == [1, 2]
