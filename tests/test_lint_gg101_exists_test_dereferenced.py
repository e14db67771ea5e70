"""GG101: a clearing under a test that an object exists (``if net is not None:``), where the
same iteration dereferences that object on every path (calls it, reads an attribute of it), is run on
every pass that reaches the step: a pass without the object raises at the dereference and steps nothing.
So the clearing is no decision, whatever it clears (the optimizer, the module) and wherever the test sits
(the loop, a helper whose parameter has another name, a method on ``self.model``, before or after the
dereference, inside the micro-step loop).

Every program is run in float64 and compared with plain SGD on each batch's own gradient (written without
``.grad``, by ``torch.autograd.grad``). Negative controls: the same clearing under a test of an object the
iteration does not dereference (a logger that may be absent: with it absent nothing is cleared and the
steps reapply old gradients, which the run shows), or dereferenced only inside a ``try`` body (an absent
object may be caught there), or only under another test, is still reported; so is a plain ``if loss:`` (a
tensor that exists may be false).
"""

from __future__ import annotations

import re

import torch
from _findings import codes

FUNCTION = """\
import torch


def train(net, loader, opt):
    for x, y in loader:
        if net is not None:
            opt.zero_grad()
        ((net(x) - y) ** 2).mean().backward()
        opt.step()


def run(model, loader, logger=None):
    train(model, loader, torch.optim.SGD(model.parameters(), lr=0.1))
"""

# the dereference first and the clearing after the step
AFTER_STEP = """\
import torch


def train(net, loader, opt):
    for x, y in loader:
        loss = ((net(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        if net is not None:
            net.zero_grad()


def run(model, loader, logger=None):
    train(model, loader, torch.optim.SGD(model.parameters(), lr=0.1))
"""

METHOD = """\
import torch


class Trainer:
    def __init__(self, model, lr):
        self.model = model
        self.optimizer = torch.optim.SGD(model.parameters(), lr=lr)

    def reset(self):
        if self.model is not None:
            self.optimizer.zero_grad(set_to_none=True)

    def train_epoch(self, loader):
        for x, y in loader:
            self.reset()
            loss = ((self.model(x) - y) ** 2).mean()
            loss.backward()
            self.optimizer.step()


def run(model, loader, logger=None):
    Trainer(model, 0.1).train_epoch(loader)
"""

# a helper whose parameter has another name, and the dereference inside the micro-step loop
HELPER = """\
import torch


def clear(o, m):
    if m is not None:
        o.zero_grad()


def loss_of(m, x, y):
    return ((m(x) - y) ** 2).mean()


def train(net, loader, opt):
    for x, y in loader:
        clear(opt, net)
        for xs, ys in ((x, y),):
            loss_of(net, xs, ys).backward()
        opt.step()


def run(model, loader, logger=None):
    train(model, loader, torch.optim.SGD(model.parameters(), lr=0.1))
"""

# negative control: a test of ANOTHER object, which the iteration dereferences only under the same test
OTHER_OBJECT = FUNCTION.replace("def train(net, loader, opt):", "def train(net, loader, opt, logger=None):").replace(
    "        if net is not None:\n            opt.zero_grad()\n",
    "        if logger is not None:\n            opt.zero_grad()\n            logger.info('cleared')\n")

# negative control: the only dereference of the tested object is inside a try body
IN_TRY = """\
import torch


def train(net, loader, opt, other):
    for x, y in loader:
        if net is not None:
            opt.zero_grad()
        try:
            out = net(x)
        except TypeError:
            out = other(x)
        ((out - y) ** 2).mean().backward()
        opt.step()


def run(model, loader, logger=None):
    train(model, loader, torch.optim.SGD(model.parameters(), lr=0.1), model)
"""

# negative control: the only dereference of the tested object is itself under another test
GUARDED_DEREF = """\
import torch


def train(net, loader, opt, params):
    for x, y in loader:
        if net is not None:
            opt.zero_grad()
        if x.shape[0] > 1:
            net.train()
        w, b = params
        ((x @ w.t() + b - y) ** 2).mean().backward()
        opt.step()


def run(model, loader, logger=None):
    train(model, loader, torch.optim.SGD(model.parameters(), lr=0.1), list(model.parameters()))
"""


# the float64 run and its plain-SGD reference are the ones of the clearing-under-an-exists-test tests
from test_lint_gg101_clear_under_exists_test import _gg101, _loader, _reference, _run  # noqa: E402


def _renamed(source: str) -> str:
    for old, new in (("model", "backbone"), ("net", "m"), ("optimizer", "o"), ("Trainer", "Loop"), ("reset", "begin"),
                     ("train_epoch", "fit"), ("opt", "updater"), ("clear", "prepare"), ("loss_of", "cost")):
        source = re.sub(rf"\b{old}\b", new, source)
    return source


POSITIVE = (FUNCTION, AFTER_STEP, METHOD, HELPER)


def test_a_clearing_under_a_test_of_an_object_the_pass_dereferences_is_run_on_every_pass():
    loader = _loader()
    want = _reference(loader)
    for source in POSITIVE:
        assert torch.allclose(_run(source, loader), want), source
        assert _gg101(source) == [], source


def test_renamed_forms_are_not_reported():
    loader = _loader()
    for source in POSITIVE:
        renamed = _renamed(source)
        assert renamed != source
        assert torch.allclose(_run(renamed, loader), _reference(loader))
        assert _gg101(renamed) == [], renamed


def test_negative_control_an_object_the_pass_does_not_dereference_still_draws_gg101():
    loader = _loader()
    # with the logger absent nothing is cleared: the steps reapply earlier batches' gradients
    assert not torch.allclose(_run(OTHER_OBJECT, loader), _reference(loader))
    assert _gg101(OTHER_OBJECT) == ["GG101"]
    assert _gg101(_renamed(OTHER_OBJECT)) == ["GG101"]


def test_negative_control_a_dereference_inside_a_try_body_proves_nothing():
    assert _gg101(IN_TRY) == ["GG101"]
    assert _gg101(_renamed(IN_TRY)) == ["GG101"]


def test_negative_control_a_dereference_under_another_test_proves_nothing():
    loader = _loader()
    assert torch.allclose(_run(GUARDED_DEREF, loader), _reference(loader))  # the program itself is right
    assert _gg101(GUARDED_DEREF) == ["GG101"]


def test_negative_control_a_plain_truth_test_is_no_existence_test():
    # `if loss:` on a tensor: dereferenced every pass, yet a zero loss is false and skips the clearing
    source = FUNCTION.replace("        if net is not None:\n            opt.zero_grad()\n        ((net(x) - y) ** 2).mean().backward()\n",
                              "        loss = ((net(x) - y) ** 2).mean()\n        if loss:\n            opt.zero_grad()\n"
                              "        loss.backward()\n")
    assert "if loss:" in source
    assert _gg101(source) == ["GG101"]
