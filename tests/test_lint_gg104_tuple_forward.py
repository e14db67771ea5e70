"""GG104: the undivided window's loss is seen through a tuple-returning forward and a sign.

nanoGPT's loop (``logits, loss = model(X, Y)`` with a ``forward`` that returns ``(logits,
loss)``, then ``loss.backward()`` K times before one step) and NeMo RL's policy loss
(``-(advantages * logprobs).mean()``, back-propagated per micro-batch): both sum K mean
losses, so the step applies K times the window's mean gradient. Each program is run in
float64 and its window gradient compared to the full batch's mean-loss gradient (the
independent reference): the reported ones differ from it, the divided twins match it and are
not reported. Rewrites (renamed, a method, a helper returning the tuple) keep the verdict.
"""

from __future__ import annotations

import textwrap

import pytest
import torch

from _findings import codes

TUPLE = """\
import torch


class Net(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x, targets):
        out = self.inner(x)
        return out, ((out - targets) ** 2).sum(dim=1).mean()


def window_grad(model, xs, ys, steps):
    net = Net(model)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.0)
    size = xs.shape[0] // steps
    for it in range(1):
        for micro in range(steps):
            out, loss = net(xs[micro * size:(micro + 1) * size], ys[micro * size:(micro + 1) * size])
            loss.backward()
        grads = [p.grad.clone() for p in model.parameters()]
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return grads
"""

SIGN = """\
import torch


def objective(pred, target):
    return -(-((pred - target) ** 2).sum(dim=1)).mean()


def window_grad(model, xs, ys, steps):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    size = xs.shape[0] // steps
    for it in range(1):
        optimizer.zero_grad()
        for micro in range(steps):
            part = slice(micro * size, (micro + 1) * size)
            loss = objective(model(xs[part]), ys[part])
            loss.backward()
        grads = [p.grad.clone() for p in model.parameters()]
        optimizer.step()
    return grads
"""

TUPLE_METHOD = """\
import torch


class Net(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x, targets):
        out = self.inner(x)
        return out, ((out - targets) ** 2).sum(dim=1).mean()


class Runner:
    def __init__(self, net, n):
        self.net, self.n = net, n
        self.opt = torch.optim.SGD(net.parameters(), lr=0.0)

    def batch(self, xs, ys, i):
        size = xs.shape[0] // self.n
        return xs[i * size:(i + 1) * size], ys[i * size:(i + 1) * size]

    def run(self, xs, ys):
        for epoch in range(1):
            for i in range(self.n):
                x, y = self.batch(xs, ys, i)
                prediction, objective_value = self.net(x, y)
                objective_value.backward()
            grads = [p.grad.clone() for p in self.net.inner.parameters()]
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
        return grads


def window_grad(model, xs, ys, steps):
    return Runner(Net(model), steps).run(xs, ys)
"""

BAD = {"tuple": TUPLE, "sign": SIGN, "tuple-method": TUPLE_METHOD}
# The fixes: the loss divided where it is back-propagated, or inside the forward / the helper.
GOOD = {
    "tuple": TUPLE.replace("loss.backward()", "(loss / steps).backward()"),
    "tuple-in-forward": TUPLE.replace("return out, ((out - targets) ** 2).sum(dim=1).mean()",
                                      "return out, ((out - targets) ** 2).sum(dim=1).mean() / self.k")
                             .replace("self.inner = inner", "self.inner, self.k = inner, 1")
                             .replace("net = Net(model)", "net = Net(model)\n    net.k = steps"),
    "sign": SIGN.replace("loss = objective(model(xs[part]), ys[part])",
                         "loss = objective(model(xs[part]), ys[part]) / steps"),
    "sign-in-helper": SIGN.replace("return -(-((pred - target) ** 2).sum(dim=1)).mean()",
                                   "return -(-((pred - target) ** 2).sum(dim=1)).mean() / k")
                          .replace("def objective(pred, target):", "def objective(pred, target, k):")
                          .replace("objective(model(xs[part]), ys[part])", "objective(model(xs[part]), ys[part], steps)"),
    "tuple-method": TUPLE_METHOD.replace("objective_value.backward()", "(objective_value / self.n).backward()"),
}


def _gg104(source):
    return [c for c in codes(source) if c == "GG104"]


def _matches_full_batch(source) -> bool:
    namespace = {}
    exec(compile(textwrap.dedent(source), "<train>", "exec"), namespace)
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2).double()
    g = torch.Generator().manual_seed(1)
    xs, ys = torch.randn(12, 3, generator=g, dtype=torch.float64), torch.randn(12, 2, generator=g, dtype=torch.float64)
    got = namespace["window_grad"](model, xs, ys, 3)
    model.zero_grad()
    ((model(xs) - ys) ** 2).sum(dim=1).mean().backward()  # the reference: the window's mean loss
    return all(torch.allclose(a, p.grad) for a, p in zip(got, model.parameters()))


@pytest.mark.parametrize("form", sorted(BAD))
def test_an_undivided_window_seen_through_a_tuple_forward_or_a_sign_is_reported(form):
    assert not _matches_full_batch(BAD[form])  # K times the mean: not the full batch's gradient
    assert _gg104(BAD[form]) == ["GG104"]


@pytest.mark.parametrize("form", sorted(GOOD))
def test_negative_control_the_divided_twins_match_the_full_batch_and_are_not_reported(form):
    assert GOOD[form] not in BAD.values()
    assert _matches_full_batch(GOOD[form])
    assert _gg104(GOOD[form]) == []


def test_renamed_and_the_sign_moved_keep_the_verdict():
    renamed = TUPLE.replace("Net", "Wrapper").replace("out, loss", "preds, objective").replace(
        "loss.backward()", "objective.backward()").replace("micro", "j").replace("steps", "n_acc")
    assert not _matches_full_batch(renamed)
    assert _gg104(renamed) == ["GG104"]
    plus = SIGN.replace("return -(-(", "return +((")
    assert not _matches_full_batch(plus)
    assert _gg104(plus) == ["GG104"]


@pytest.mark.parametrize("form", sorted(BAD))
def test_the_offered_fix_gives_the_full_batch_gradient(form):
    from gradguard.lint.autofix import fix_source

    fixed = fix_source(textwrap.dedent(BAD[form])).text
    assert fixed != textwrap.dedent(BAD[form])  # the window size is a plain variable: the fix is certain
    assert _matches_full_batch(fixed)
    assert _gg104(fixed) == []
