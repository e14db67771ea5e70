"""Shapes of real code whose mechanical mutants the linter missed: a loss summed from 0 by ``+=``, a
mean of the pass's terms (``(a + b) / 2``), apex's ``with amp.scale_loss(loss, opt) as scaled``, a loss
object the class holds (``self.objective = objective``), a log line after the backward pass that
rebinds the loss from a running total (``loss = tr_loss / (step + 1)``), and a loop over
``tqdm(enumerate(loader))``.

Each buggy program is run in float64 against an independent reference: one plain-PyTorch step on the
whole window's mean loss per window (GG104, GG105), or the running total's ``requires_grad`` (GG201).
The correct twin must land on the reference (or hold a number) and stay silent; the buggy program
must not land on it (the negative control) and must be flagged, whatever the names and the form.
"""

from __future__ import annotations

import re

import pytest
import torch

from _findings import codes

# --- GG104: accumulation windows whose loss is a mean nothing divides by K -----------------------

# the loss summed from 0 over its terms, then back-propagated undivided
SUM_FROM_ZERO = """\
import torch


def train(model, opt, data, k):
    for step, (x, y) in enumerate(data):
        loss = 0.
        out = model(x)
        loss += ((out - y) ** 2).mean()
        loss += (out - y).abs().mean()
        # FIX: loss = loss / k
        loss.backward()
        if (step + 1) % k == 0:
            opt.step()
            opt.zero_grad()
"""

# a helper sums the terms from 0 and the method of a class that holds its model calls it
SUM_IN_HELPER_METHOD = """\
import torch


def terms_of(out, y):
    total = 0
    for err in ((out - y) ** 2, (out - y).abs()):
        total += err.mean()
    return total


class Runner:
    def __init__(self, net, optimizer, every):
        self.net, self.optimizer, self.every = net, optimizer, every

    def fit(self, batches):
        for i, (x, y) in enumerate(batches):
            objective = terms_of(self.net(x), y)
            # FIX: objective = objective / self.every
            objective.backward()
            if (i + 1) % self.every == 0:
                self.optimizer.step()
                self.optimizer.zero_grad()


def train(model, opt, data, k):
    Runner(model, opt, k).fit(data)
"""

# the mean of the pass's two terms, `(a + b) / 2`: a mean still, not divided by the window
MEAN_OF_TERMS = """\
import torch


def train(model, opt, data, k):
    for step, (x, y) in enumerate(data):
        out = model(x)
        first = ((out - y) ** 2).mean()
        second = (out - y).abs().mean()
        loss = (first + second) / 2
        # FIX: loss = loss / k
        loss.backward()
        if (step + 1) % k == 0:
            opt.step()
            opt.zero_grad()
"""

# apex's form: the scaled loss of `with amp.scale_loss(loss, opt) as scaled` is back-propagated
# (a stand-in for apex with the scale 1 that it takes off again before the step)
APEX_SCALE_LOSS = """\
import contextlib

import torch


class amp:
    @staticmethod
    @contextlib.contextmanager
    def scale_loss(loss, optimizer):
        yield loss


def train(model, opt, data, k):
    for step, (x, y) in enumerate(data):
        loss = torch.nn.functional.mse_loss(model(x), y)
        # FIX: loss = loss / k
        with amp.scale_loss(loss, opt) as scaled_loss:
            scaled_loss.backward()
        if (step + 1) % k == 0:
            opt.step()
            opt.zero_grad()
"""

# a loss function the class holds as an attribute (not an inherited method that may scale), called
# in a micro-step loop `for _ in range(K)`
HELD_OBJECTIVE = """\
import torch


class Distiller:
    def __init__(self, student, objective, opt, k):
        self.student, self.objective, self.opt, self.k = student, objective, opt, k

    def update(self, stream):
        for _ in range(self.k):
            x, y = next(stream)
            loss = self.objective(self.student(x), y)
            # FIX: loss = loss / self.k
            loss.backward()
        self.opt.step()
        self.opt.zero_grad()


def train(model, opt, data, k):
    stream = iter(data)
    d = Distiller(model, torch.nn.functional.mse_loss, opt, k)
    for _ in range(len(data) // k):
        d.update(stream)
"""

GG104_PROGRAMS = {"sum_from_zero": SUM_FROM_ZERO, "sum_in_helper_method": SUM_IN_HELPER_METHOD,
                  "mean_of_terms": MEAN_OF_TERMS, "apex_scale_loss": APEX_SCALE_LOSS, "held_objective": HELD_OBJECTIVE}
#: the loss each program computes per micro-batch, for the reference
GG104_LOSS = {"sum_from_zero": "sum", "sum_in_helper_method": "sum", "mean_of_terms": "half_sum",
              "apex_scale_loss": "mse", "held_objective": "mse"}

K, MICRO, WINDOWS = 4, 3, 2


def twin(source: str) -> str:
    return "\n".join(line.replace("# FIX: ", "") for line in source.split("\n"))


def _only(source: str, code: str) -> list:
    return [c for c in codes(source) if c == code]


def _setup():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 6), torch.nn.Tanh(), torch.nn.Linear(6, 1)).double()
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(MICRO, 5, generator=g, dtype=torch.float64), torch.randn(MICRO, 1, generator=g, dtype=torch.float64))
            for _ in range(K * WINDOWS)]
    return model, data


def _params(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _run(source: str):
    namespace: dict = {}
    exec(compile(source, "<train>", "exec"), namespace)
    model, data = _setup()
    namespace["train"](model, torch.optim.SGD(model.parameters(), lr=0.1), data, K)
    return _params(model)


def _reference(kind: str):
    """One plain step per window on the mean loss of the window's items (equal micro-batches)."""
    model, data = _setup()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for w in range(WINDOWS):
        x = torch.cat([d[0] for d in data[w * K:(w + 1) * K]])
        y = torch.cat([d[1] for d in data[w * K:(w + 1) * K]])
        out = model(x)
        mse, l1 = ((out - y) ** 2).mean(), (out - y).abs().mean()
        loss = {"sum": mse + l1, "half_sum": (mse + l1) / 2, "mse": mse}[kind]
        opt.zero_grad()
        loss.backward()
        opt.step()
    return _params(model)


@pytest.mark.parametrize("name", sorted(GG104_PROGRAMS))
def test_gg104_the_undivided_window_is_flagged_and_wrong_its_twin_silent_and_exact(name):
    source = GG104_PROGRAMS[name]
    assert _only(source, "GG104") == ["GG104"]
    assert _only(twin(source), "GG104") == []
    reference = _reference(GG104_LOSS[name])
    assert torch.allclose(_run(twin(source)), reference, rtol=0, atol=1e-12)
    assert not torch.allclose(_run(source), reference, atol=1e-4)  # negative control: K times the mean


def _renamed(source: str) -> str:
    """Every user name renamed (method calls such as ``.step()`` kept)."""
    for old, new in (("loss", "objective_value"), ("model", "network"), ("opt", "o"), ("step", "it"), ("terms_of", "combine"),
                     ("Runner", "Worker"), ("Distiller", "Teacher"), ("first", "a1"), ("second", "b1"), ("out", "pred_"),
                     ("tr_loss", "running"), ("tr_a", "seen_a")):
        source = re.sub(r"(?<![.\w])%s\b" % old, new, source)
    return source


def _unrelated(source: str) -> str:
    """A scheduler-free log helper and a `reduction="sum"` loss object nothing here calls."""
    return source + ('\n\ndef summed_criterion():\n    return torch.nn.MSELoss(reduction="sum")\n'
                     "\n\ndef log(value):\n    print(float(value))\n")


@pytest.mark.parametrize("rewrite", [_renamed, _unrelated], ids=lambda f: f.__name__)
@pytest.mark.parametrize("name", sorted(GG104_PROGRAMS))
def test_gg104_rewrites_that_keep_the_computation_keep_the_verdict(name, rewrite):
    source = rewrite(GG104_PROGRAMS[name])
    assert _only(source, "GG104") == ["GG104"]
    assert _only(twin(source), "GG104") == []


def test_gg104_a_sum_of_n_terms_divided_by_the_window_literal_is_scaled():
    """``(a + b) / 2`` where the window's own size is the literal 2: read as the window's division."""
    source = MEAN_OF_TERMS.replace("% k == 0", "% 2 == 0")
    assert _only(source, "GG104") == []


# --- GG105 / GG201: a log line after the pass rebinds the loss from a running total --------------

# the loop logs `loss = tr_loss / (step + 1)` after the pass; the next iteration binds `loss` afresh
LOGGED_AVERAGE = """\
import torch


def train(model, opt, data, k):
    tr_loss = 0.
    for step, (x, y) in enumerate(data):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss = loss / k
        loss.backward()
        # BAD: tr_loss += loss
        tr_loss += loss.item()
        if (step + 1) % k == 0:
            opt.step()
            opt.zero_grad()
        if step % 2 == 0:
            loss = tr_loss / (step + 1)
            print(loss)
    return tr_loss
"""

# the same in a method, the running totals of the loss's parts added into it by `loss += a + b`
LOGGED_PARTS_METHOD = """\
import torch


class Trainer:
    def __init__(self, net, optimizer, every):
        self.net, self.optimizer, self.every = net, optimizer, every

    def fit(self, batches):
        tr_a = 0.
        for i, (x, y) in enumerate(batches):
            pred = self.net(x)
            a = 0.
            for part in (pred[:, 0], pred[:, 0] * 2):
                a += ((part - y[:, 0]) ** 2).mean()
            loss = 0.
            loss += a + (pred - y).abs().mean()
            loss = loss / self.every
            loss.backward()
            # BAD: tr_a += a
            tr_a += a.item()
            if (i + 1) % self.every == 0:
                self.optimizer.step()
                self.optimizer.zero_grad()
                a = tr_a / (i + 1)
                print(a)
        return tr_a


def train(model, opt, data, k):
    return Trainer(model, opt, k).fit(data)
"""

LOGGED = {"logged_average": LOGGED_AVERAGE, "logged_parts_method": LOGGED_PARTS_METHOD}


def bad(source: str) -> str:
    lines = source.split("\n")
    out = []
    for i, line in enumerate(lines):
        if "# BAD: " in line:
            out.append(line.replace("# BAD: ", ""))
        elif i > 0 and "# BAD: " in lines[i - 1]:
            continue  # the correct line the bad one replaces
        else:
            out.append(line)
    return "\n".join(out)


def _total(source: str):
    namespace: dict = {}
    exec(compile(source, "<train>", "exec"), namespace)
    model, data = _setup()
    return namespace["train"](model, torch.optim.SGD(model.parameters(), lr=0.1), data, K)


@pytest.mark.parametrize("name", sorted(LOGGED))
def test_gg201_a_total_of_the_loss_tensor_is_flagged_and_keeps_a_graph(name):
    source = LOGGED[name]
    assert _only(bad(source), "GG201") == ["GG201"]
    assert _only(source, "GG201") == []
    assert isinstance(_total(source), float)  # the twin sums numbers
    assert _total(bad(source)).grad_fn is not None  # negative control: the total holds every pass's graph


@pytest.mark.parametrize("rewrite", [_renamed, _unrelated], ids=lambda f: f.__name__)
@pytest.mark.parametrize("name", sorted(LOGGED))
def test_gg201_rewrites_that_keep_the_computation_keep_the_verdict(name, rewrite):
    source = rewrite(LOGGED[name])
    assert _only(bad(source), "GG201") == ["GG201"]
    assert _only(source, "GG201") == []


@pytest.mark.parametrize("name", sorted(LOGGED))
def test_gg105_a_logged_average_after_the_pass_divides_nothing_back_propagated(name):
    """``loss = tr_loss / (step + 1)`` after the backward pass feeds a log: no GG105 (it was reported),
    while the same division before the pass is one (the control)."""
    source = LOGGED[name]
    assert _only(source, "GG105") == []
    divided = source.replace("loss = loss / k\n", "loss = loss / (step % k + 1)\n").replace(
        "loss = loss / self.every\n", "loss = loss / (i % self.every + 1)\n")
    assert _only(divided, "GG105") == ["GG105"]


# --- GG105: the loop iterates `tqdm(enumerate(loader))` ------------------------------------------

TQDM_ENUMERATE = """\
import torch


def tqdm(iterable, **kwargs):
    return iterable


def train(model, opt, data, k):
    for step, (x, y) in tqdm(enumerate(data), total=len(data)):
        loss = torch.nn.functional.mse_loss(model(x), y)
        # BAD: loss = loss / (step % k + 1)
        loss = loss / k
        loss.backward()
        if (step + 1) % k == 0:
            opt.step()
            opt.zero_grad()
"""


@pytest.mark.parametrize("rewrite", [lambda s: s, _renamed], ids=["plain", "renamed"])
def test_gg105_the_micro_step_counter_of_a_wrapped_enumerate(rewrite):
    source = rewrite(TQDM_ENUMERATE)
    assert _only(bad(source), "GG105") == ["GG105"]
    assert _only(source, "GG105") == []
    reference = _reference("mse")
    assert torch.allclose(_run(TQDM_ENUMERATE), reference, rtol=0, atol=1e-12)
    assert not torch.allclose(_run(bad(TQDM_ENUMERATE)), reference, atol=1e-4)  # weights 1, 1/2, 1/3, 1/4
