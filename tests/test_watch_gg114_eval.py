"""GG114 for evaluation code: validation batches back-propagated with the model in eval() mode, applied
by the next training step (the Annotated Transformer's ``SimpleLossCompute`` shape).

The truth in float64, without the watch: the first step after the validation applies the training
batch's gradient plus the validation batches' (plain PyTorch, the same weights). The finding comes at
that step, whatever the code's shape (a loss-compute class, a helper with a flag, a trainer's method,
other names). Twins: the fixed loop (no backward in validation), training in eval() mode throughout
(frozen batch-norm statistics), a loop that switches to eval() mode for good, and an evaluation pass
whose gradient is cleared before the training pass (an adversarial-example step).
"""

import pytest
import torch
import torch.nn.functional as F

import gradguard as gg


def _setup():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)).double()
    head = torch.nn.Linear(3, 3).double()  # a second model that no one sets to eval() (as the generator in the source)
    opt = torch.optim.SGD(list(model.parameters()) + list(head.parameters()), lr=0.1)
    return model, head, opt


def _data(n, seed):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(4, 5, generator=g, dtype=torch.float64), torch.randint(0, 3, (4,), generator=g)) for _ in range(n)]


TRAIN, VALID = _data(3, 1), _data(2, 2)


class LossCompute:
    def __init__(self, head, opt=None, leak=True):
        self.head, self.opt, self.leak = head, opt, leak

    def __call__(self, out, y):
        loss = F.cross_entropy(self.head(out), y)
        if self.leak or self.opt is not None:
            loss.backward()
        if self.opt is not None:
            self.opt.step()
            self.opt.zero_grad()
        return loss.item()


def class_form(model, head, opt, leak, epochs=3):
    for _ in range(epochs):
        model.train()
        for x, y in TRAIN:
            LossCompute(head, opt, leak)(model(x), y)
        model.eval()
        for x, y in VALID:
            LossCompute(head, None, leak)(model(x), y)


def _one(net, top, o, xb, yb, training, leak):
    err = F.cross_entropy(top(net(xb)), yb)
    if training or leak:
        err.backward()
    if training:
        o.step()
        o.zero_grad()


def helper_form(model, head, opt, leak, epochs=3):
    for _ in range(epochs):
        model.train()
        for x, y in TRAIN:
            _one(model, head, opt, x, y, True, leak)
        model.eval()
        for x, y in VALID:
            _one(model, head, opt, x, y, False, leak)


class Runner:
    def __init__(self, m, h, o, leak):
        self.m, self.h, self.o, self.leak = m, h, o, leak

    def epoch(self, batches, train):
        self.m.train(train)
        for a, b in batches:
            _one(self.m, self.h, self.o, a, b, train, self.leak)

    def fit(self, n):
        for _ in range(n):
            self.epoch(TRAIN, True)
            self.epoch(VALID, False)


def method_form(model, head, opt, leak, epochs=3):
    Runner(model, head, opt, leak).fit(epochs)


FORMS = {"class": class_form, "helper": helper_form, "method": method_form}


def _run(form, leak, watch=True):
    model, head, opt = _setup()
    applied, weights = [], []
    orig = opt.step

    def step(*a, **kw):
        ps = list(model.parameters()) + list(head.parameters())
        applied.append([p.grad.clone() for p in ps])
        weights.append([p.detach().clone() for p in ps])
        return orig(*a, **kw)

    opt.step = step
    if not watch:
        FORMS[form](model, head, opt, leak)
        return None, applied, weights
    with gg.watch(mode="record") as w:
        FORMS[form](model, head, opt, leak)
    return [(f.code, f.step) for f in w.findings], applied, weights


def _training_gradient(weights, x, y):
    """Plain PyTorch at the step's weights: the gradient of its own training batch alone."""
    model, head, _ = _setup()
    with torch.no_grad():
        for p, w in zip(list(model.parameters()) + list(head.parameters()), weights):
            p.copy_(w)
    F.cross_entropy(head(model(x)), y).backward()
    return [p.grad for p in list(model.parameters()) + list(head.parameters())]


@pytest.mark.parametrize("form", sorted(FORMS))
def test_validation_backward_applied_by_the_next_epochs_first_step_is_gg114_there(form):
    _, applied, weights = _run(form, True, watch=False)
    x, y = TRAIN[0]
    step4 = 3  # epoch 2's first step: 3 training steps per epoch
    ref = _training_gradient(weights[step4], x, y)
    assert not all(torch.allclose(a, r) for a, r in zip(applied[step4], ref))  # the truth: more than its batch
    ref1 = _training_gradient(weights[1], *TRAIN[1])
    assert all(torch.allclose(a, r) for a, r in zip(applied[1], ref1))  # (a step inside the epoch is right)
    found, _, _ = _run(form, True)
    assert found == [("GG114", 4)], form


@pytest.mark.parametrize("form", sorted(FORMS))
def test_the_fixed_loop_is_clean(form):
    _, applied, weights = _run(form, False, watch=False)
    ref = _training_gradient(weights[3], *TRAIN[0])
    assert all(torch.allclose(a, r) for a, r in zip(applied[3], ref))
    found, _, _ = _run(form, False)
    assert found == [], form


def test_training_in_eval_mode_throughout_is_clean():
    model, head, opt = _setup()
    with gg.watch(mode="record") as w:
        model.eval()
        head.eval()
        for _ in range(3):
            for x, y in TRAIN:
                F.cross_entropy(head(model(x)), y).backward()
                opt.step()
                opt.zero_grad()
    assert [f.code for f in w.findings] == []


def test_switching_to_eval_mode_for_good_is_clean():
    model, head, opt = _setup()
    with gg.watch(mode="record") as w:
        for epoch in range(4):
            model.train(epoch < 2)  # frozen statistics from the third epoch on
            for x, y in TRAIN:
                F.cross_entropy(head(model(x)), y).backward()
                opt.step()
                opt.zero_grad()
    assert [f.code for f in w.findings] == []


def test_an_evaluation_pass_cleared_before_the_training_pass_is_clean():
    """An adversarial example made in eval() mode: its backward fills .grad, zero_grad clears it."""
    model, head, opt = _setup()
    with gg.watch(mode="record") as w:
        for _ in range(3):
            for x, y in TRAIN:
                model.eval()
                xa = x.clone().requires_grad_(True)
                F.cross_entropy(head(model(xa)), y).backward()
                x_adv = (x + 0.01 * xa.grad.sign()).detach()
                model.train()
                opt.zero_grad()
                F.cross_entropy(head(model(x_adv)), y).backward()
                opt.step()
    assert [f.code for f in w.findings] == []
