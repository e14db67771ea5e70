"""GG103 when what follows the training function in its caller is another training phase.

A loop steps on `(i + 1) % K == 0` with nothing after it; its function is called, and
the caller then runs another phase: the same function again, or a second optimizer
handed to a scheduler factory and a tuning routine. Neither steps the first phase's
last partial window: a routine that back-propagates its own passes steps those (the
leftover is folded into its first window), and a fresh optimizer handed to unknown
code is not the loop's. The linter used to take both for the remainder's step.

Each program runs in float64 against a hand-written reference that steps every
window, the last partial one included: the flagged program differs from it, the
twin that steps the remainder after its loop equals it (and is not flagged).
"""

from __future__ import annotations

import textwrap

import pytest
import torch

from _findings import codes

SAME_AGAIN = """\
import torch
import torch.nn.functional as F


def phase(model, opt, data, K):
    for i, (x, y) in enumerate(data):
        loss = F.mse_loss(model(x), y) / K
        loss.backward()
        if (i + 1) % K == 0:
            opt.step()
            opt.zero_grad()
    # REMAINDER


def main(model, data):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    phase(model, opt, data, 4)
    phase(model, opt, data, 4)
"""

NEXT_OPTIMIZER = """\
import torch
import torch.nn.functional as F


class Runner:
    def __init__(self, net):
        self.net = net
        self.first_opt = torch.optim.SGD(net.parameters(), lr=0.1)

    def warmup(self, batches, every):
        for step, (a, b) in enumerate(batches):
            (F.mse_loss(self.net(a), b) / every).backward()
            if (step + 1) % every == 0:
                self.first_opt.step()
                self.first_opt.zero_grad()
        # REMAINDER

    def fit(self, batches):
        self.warmup(batches, 4)
        tune_opt = torch.optim.SGD(self.net.parameters(), lr=0.0)
        self.sched = torch.optim.lr_scheduler.LambdaLR(tune_opt, lambda e: 1.0)


def main(model, data):
    Runner(model).fit(data)
"""

FLUSH = {
    "same-again": "    if len(data) % K:\n        opt.step()\n        opt.zero_grad()\n",
    "next-optimizer": "        if len(batches) % every:\n            self.first_opt.step()\n            self.first_opt.zero_grad()\n",
}
BAD = {"same-again": SAME_AGAIN, "next-optimizer": NEXT_OPTIMIZER}
CALLS = {"same-again": 2, "next-optimizer": 1}


def _good(form):
    indent = "    " if form == "same-again" else "        "
    return BAD[form].replace(indent + "# REMAINDER\n", FLUSH[form])


def _gg103(source):
    return [c for c in codes(source) if c == "GG103"]


def _data():
    g = torch.Generator().manual_seed(3)
    return [(torch.randn(2, 3, generator=g, dtype=torch.float64), torch.randn(2, 1, generator=g, dtype=torch.float64)) for _ in range(10)]


def _model():
    torch.manual_seed(0)
    return torch.nn.Linear(3, 1).double()


def _reference(calls):
    """Plain SGD over windows of 4, the last partial window stepped too, each loss divided by 4."""
    model, data = _model(), _data()
    params = [p.detach().clone().requires_grad_() for p in model.parameters()]
    for _ in range(calls):
        for start in range(0, len(data), 4):
            grads = [torch.zeros_like(p) for p in params]
            for x, y in data[start:start + 4]:
                out = torch.nn.functional.linear(x, params[0], params[1])
                for g, d in zip(grads, torch.autograd.grad(((out - y) ** 2).mean() / 4, params)):
                    g += d
            params = [(p - 0.1 * g).detach().requires_grad_() for p, g in zip(params, grads)]
    return params


def _run(source):
    namespace = {}
    exec(compile(textwrap.dedent(source), "<train>", "exec"), namespace)
    model = _model()
    namespace["main"](model, _data())
    return list(model.parameters())


@pytest.mark.parametrize("form", sorted(BAD))
def test_a_dropped_window_before_another_phase_is_reported(form):
    got, ref = _run(BAD[form]), _reference(CALLS[form])
    assert not all(torch.allclose(a, b, rtol=1e-12, atol=1e-12) for a, b in zip(got, ref))
    assert _gg103(BAD[form]) == ["GG103"]


@pytest.mark.parametrize("form", sorted(BAD))
def test_twin_stepping_the_remainder_is_silent_and_equals_the_reference(form):
    good = _good(form)
    assert good != BAD[form]
    got, ref = _run(good), _reference(CALLS[form])
    assert all(torch.allclose(a, b, rtol=1e-12, atol=1e-12) for a, b in zip(got, ref))
    assert _gg103(good) == []


def test_renamed_and_unrelated_code_keep_the_verdict():
    renamed = SAME_AGAIN.replace("phase", "stage").replace("opt", "o").replace("K", "acc")
    renamed = renamed.replace("def main(", "def helper(z):\n    return z * 2\n\n\ndef main(")
    assert _gg103(renamed) == ["GG103"]
    assert _gg103(_good("same-again").replace("phase", "stage").replace("opt", "o").replace("K", "acc")) == []


def test_negative_control_a_caller_that_steps_the_same_optimizer_is_a_flush():
    # the caller steps the loop's own optimizer after the call: the remainder is applied
    flushed = NEXT_OPTIMIZER.replace(
        "        self.warmup(batches, 4)\n",
        "        self.warmup(batches, 4)\n        self.first_opt.step()\n        self.first_opt.zero_grad()\n",
    )
    got, ref = _run(flushed), _reference(1)
    assert all(torch.allclose(a, b, rtol=1e-12, atol=1e-12) for a, b in zip(got, ref))
    assert _gg103(flushed) == []
