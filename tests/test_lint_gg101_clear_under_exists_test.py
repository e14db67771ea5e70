"""GG101: a clearing under ``if M is not None:`` whose body only clears ``M``'s parameters covers every
parameter it can.

Where the test fails there is no ``M`` and so no parameter of it to clear; where it holds, every parameter of
``M`` is cleared before the pass. The program is run in float64: each step applies only its own batch's
gradient, the same weights as plain SGD on each batch (the reference, written without ``.grad`` by
``torch.autograd.grad``). The linter says nothing, whatever the names, as a method or a function, with
``zero_grad()``, ``p.grad = None`` or a guarded ``p.grad.zero_()``. Negative controls: the same clearing
under a test of another object (a logger that may be absent: then nothing is cleared and the steps reapply
old gradients, which the run shows) is still reported. The pass also calls ``M`` unconditionally, so a body
that does something else besides is run on every pass too (see ``test_lint_gg101_exists_test_dereferenced``).
"""

from __future__ import annotations

import re
import textwrap

import torch

from _findings import codes

METHOD = """\
import torch


class Trainer:
    def __init__(self, model, lr):
        self.model = model
        self.optimizer = torch.optim.SGD(model.parameters(), lr=lr)

    def train_epoch(self, loader):
        for x, y in loader:
            if self.model is not None:
                for param in self.model.parameters(): param.grad = None
            loss = ((self.model(x) - y) ** 2).mean()
            loss.backward()
            self.optimizer.step()


def run(model, loader, logger=None):
    Trainer(model, 0.1).train_epoch(loader)
"""

FUNCTION = """\
import torch


def train(net, loader, opt):
    for x, y in loader:
        if net is not None:
            net.zero_grad()
        ((net(x) - y) ** 2).mean().backward()
        opt.step()


def run(model, loader, logger=None):
    train(model, loader, torch.optim.SGD(model.parameters(), lr=0.1))
"""

GUARDED_ZERO = FUNCTION.replace(
    "        if net is not None:\n            net.zero_grad()\n",
    "        if net is not None:\n            for w in net.parameters():\n                if w.grad is not None:\n"
    "                    w.grad.zero_()\n")

# negative control: the clearing sits under a test of ANOTHER object, which may be absent
OTHER_OBJECT = FUNCTION.replace("def train(net, loader, opt):", "def train(net, loader, opt, logger=None):").replace(
    "        if net is not None:\n", "        if logger is not None:\n")


def _gg101(source):
    return [c for c in codes(source) if c == "GG101"]


def _run(source, loader):
    namespace = {}
    exec(compile(textwrap.dedent(source), "<train>", "exec"), namespace)
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1).double()
    namespace["run"](model, loader)
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _reference(loader):
    """Plain SGD on each batch's own gradient, float64, never through ``.grad``."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1).double()
    params = list(model.parameters())
    for x, y in loader:
        grads = torch.autograd.grad(((model(x) - y) ** 2).mean(), params)
        with torch.no_grad():
            for p, g in zip(params, grads):
                p -= 0.1 * g
    return torch.cat([p.detach().flatten() for p in params])


def _loader():
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(4, 3, generator=g, dtype=torch.float64), torch.randn(4, 1, generator=g, dtype=torch.float64))
            for _ in range(4)]


def _renamed(source: str) -> str:
    for old, new in (("model", "backbone"), ("net", "m"), ("optimizer", "o"), ("param", "q"), ("Trainer", "Loop"),
                     ("train_epoch", "fit"), ("opt", "updater")):
        source = re.sub(rf"\b{old}\b", new, source)
    return source


def test_a_clearing_under_a_test_that_its_object_exists_is_every_clearing_it_can_be():
    loader = _loader()
    want = _reference(loader)
    for source in (METHOD, FUNCTION, GUARDED_ZERO):
        assert torch.allclose(_run(source, loader), want), source
        assert _gg101(source) == [], source


def test_renamed_forms_are_not_reported():
    loader = _loader()
    for source in (METHOD, FUNCTION, GUARDED_ZERO):
        renamed = _renamed(source)
        assert renamed != source
        assert torch.allclose(_run(renamed, loader), _reference(loader))
        assert _gg101(renamed) == [], renamed


def test_negative_control_a_test_of_another_object_still_draws_gg101():
    loader = _loader()
    # with the other object absent nothing is cleared: the steps reapply earlier batches' gradients
    assert not torch.allclose(_run(OTHER_OBJECT, loader), _reference(loader))
    assert _gg101(OTHER_OBJECT) == ["GG101"]
    assert _gg101(_renamed(OTHER_OBJECT)) == ["GG101"]


def test_a_body_that_does_more_than_clear_is_run_on_every_pass_too():
    # the pass calls `net(x)` unconditionally: a pass without `net` raises there, so the test holds on every
    # pass that steps, whatever else its body does
    source = FUNCTION.replace("            net.zero_grad()\n", "            net.zero_grad()\n            print('cleared')\n")
    assert source != FUNCTION
    loader = _loader()
    assert torch.allclose(_run(source, loader), _reference(loader))
    assert _gg101(source) == []
