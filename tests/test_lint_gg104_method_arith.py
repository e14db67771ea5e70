"""GG104: a loss scaled by a method-form operator (``loss.sum().mul(c / (B * R))``) is scaled.

EDM's shape: each of R micro-batches back-propagates its per-item losses summed
and multiplied by 1 / (the whole window's item count), then one step: the
gradient is the mean over the window. ``x.mul(w)`` / ``x.div(k)`` read as
``x * w`` / ``x / k``. Each program is run in float64 and its window gradient is
compared to the full-batch mean loss's gradient (the independent reference).
Negative control: a plain mean multiplied by a literal weight with ``.mul(2.0)``
is still reported, and its gradient is not the reference's.
"""

from __future__ import annotations

import textwrap

import pytest
import torch

from _findings import codes

FUNCTION = """\
import torch


def window_grad(model, xs, ys, rounds, loss_scaling=1.0, updates=1):
    batch = xs.shape[0] // rounds
    batch_total = batch * rounds
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    for _ in range(updates):
        optimizer.zero_grad(set_to_none=True)
        for r in range(rounds):
            x, y = xs[r * batch:(r + 1) * batch], ys[r * batch:(r + 1) * batch]
            per_item = ((model(x) - y) ** 2).sum(dim=1)
            per_item.sum().mul(loss_scaling / batch_total).backward()
        grads = [p.grad.clone() for p in model.parameters()]
        optimizer.step()
    return grads
"""

METHOD = """\
import torch


class Stepper:
    def __init__(self, net):
        self.net = net

    def items(self, x, y):
        return ((self.net(x) - y) ** 2).sum(dim=1)

    def accumulate(self, xs, ys, n_rounds, n_updates=1):
        size = xs.shape[0] // n_rounds
        opt = torch.optim.SGD(self.net.parameters(), lr=0.0)
        while n_updates > 0:
            n_updates -= 1
            opt.zero_grad(set_to_none=True)
            for k in range(n_rounds):
                part = slice(k * size, (k + 1) * size)
                self.items(xs[part], ys[part]).sum().div(size * n_rounds).backward()
            grads = [p.grad.clone() for p in self.net.parameters()]
            opt.step()
        return grads


def window_grad(model, xs, ys, rounds):
    return Stepper(model).accumulate(xs, ys, rounds)
"""

GOOD = {"function": FUNCTION, "method": METHOD}
BAD = FUNCTION.replace("per_item.sum().mul(loss_scaling / batch_total).backward()",
                       "per_item.mean().mul(2.0).backward()")
BAD_METHOD = METHOD.replace(".sum().div(size * n_rounds).backward()", ".mean().mul(1.0).backward()")


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


@pytest.mark.parametrize("form", sorted(GOOD))
def test_a_per_item_sum_scaled_by_the_window_item_count_is_not_reported(form):
    assert _matches_full_batch(GOOD[form])
    assert _gg104(GOOD[form]) == []


def test_renamed_gives_the_same_verdict():
    renamed = FUNCTION.replace("batch_total", "n_all").replace("per_item", "v").replace("rounds", "R")
    assert _gg104(renamed) == []


@pytest.mark.parametrize("bad", [BAD, BAD_METHOD], ids=["function", "method"])
def test_negative_control_a_mean_times_a_literal_weight_is_still_reported(bad):
    assert bad not in (FUNCTION, METHOD)
    assert not _matches_full_batch(bad)
    assert _gg104(bad) == ["GG104"]
