"""Window rules on what the file proves about K and the data's length.

* GG103 is not claimed where the file proves every window whole: K is a constructor's
  default of 1 that no construction overrides (``self.k`` set once in ``__init__``), or the
  data is a list built over a generator of a literal length that K divides.
* GG111: a step whose condition is the window test's negation (``if i % K == 0:
  accumulate; else: step``) closes a window on K - 1 of every K micro-batches, each pass
  divided by K (Accelerate's example with the branches swapped).

Each program runs in float64 against a hand-written reference that steps every window of K
passes with each loss divided by K; twins equal it and are silent, flagged programs differ.
Negative controls: K handed in by a construction (4), or a length K does not divide, draws
GG103 again; K = 2 with the negated test is whole windows and stays silent.
"""

from __future__ import annotations

import textwrap

import pytest
import torch

from _findings import codes

DEFAULT_ONE = """\
import torch
import torch.nn.functional as F


class Loop:
    def __init__(self, net, lr=0.1, every=1):
        self.net, self.every = net, every
        self.opt = torch.optim.SGD(net.parameters(), lr=lr)
        self.n = 5

    def one(self, loss, epoch, idx):
        (loss / self.every).backward()
        seen = idx + self.n * epoch + 1
        if seen % self.every == 0:
            self.opt.step()
            self.opt.zero_grad()

    def run(self, data):
        for epoch in range(1):
            for idx in range(self.n):
                x, y = data[idx]
                self.one(F.mse_loss(self.net(x), y), epoch, idx)


def main(model, data):
    Loop(model).run(data)
"""

GENERATED = """\
import torch
import torch.nn.functional as F

K = 4


def main(model, data):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    pairs = [(a, b) for a, b in (data[j] for j in range(8))]
    for i, (x, y) in enumerate(pairs):
        (F.mse_loss(model(x), y) / K).backward()
        if (i + 1) % K == 0:
            opt.step()
            opt.zero_grad()
"""

SWAPPED = """\
import torch
import torch.nn.functional as F

K = 4


def main(model, data):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i, (x, y) in enumerate([data[j] for j in range(8)]):
        if i % K == 0:  # BUG
            (F.mse_loss(model(x), y) / K).backward()
        else:
            (F.mse_loss(model(x), y) / K).backward()
            opt.step()
            opt.zero_grad()
"""

SWAPPED_METHOD = """\
import torch
import torch.nn.functional as F


class Tr:
    def __init__(self, m, window):
        self.m, self.w = m, window
        self.o = torch.optim.SGD(m.parameters(), lr=0.1)

    def loss(self, x, y):
        return F.mse_loss(self.m(x), y) / self.w

    def fit(self, batches):
        for n in range(8):
            x, y = batches[n]
            self.loss(x, y).backward()
            if (n + 1) % self.w != 0:  # BUG
                self.o.step()
                self.o.zero_grad()


def main(model, data):
    Tr(model, 4).fit(data)
"""

FIXED = {
    SWAPPED: ("if i % K == 0:  # BUG", "if (i + 1) % K != 0:"),
    SWAPPED_METHOD: ("if (n + 1) % self.w != 0:  # BUG", "if (n + 1) % self.w == 0:"),
}


def _lint(source, code):
    return [c for c in codes(source) if c == code]


def _data(n=8):
    g = torch.Generator().manual_seed(5)
    return [(torch.randn(2, 3, generator=g, dtype=torch.float64), torch.randn(2, 1, generator=g, dtype=torch.float64)) for _ in range(n)]


def _model():
    torch.manual_seed(0)
    return torch.nn.Linear(3, 1).double()


def _reference(n, k):
    """SGD over whole windows of k (the last partial one stepped too), each loss divided by k."""
    model, data = _model(), _data()[:n]
    params = [p.detach().clone().requires_grad_() for p in model.parameters()]
    for start in range(0, n, k):
        grads = [torch.zeros_like(p) for p in params]
        for x, y in data[start:start + k]:
            out = torch.nn.functional.linear(x, params[0], params[1])
            for g, d in zip(grads, torch.autograd.grad(((out - y) ** 2).mean() / k, params)):
                g += d
        params = [(p - 0.1 * g).detach().requires_grad_() for p, g in zip(params, grads)]
    return params


def _same(source, n, k) -> bool:
    namespace = {}
    exec(compile(textwrap.dedent(source), "<train>", "exec"), namespace)
    model = _model()
    namespace["main"](model, _data())
    return all(torch.allclose(a, b, rtol=1e-12, atol=1e-12) for a, b in zip(model.parameters(), _reference(n, k)))


# --- GG103: K from a constructor default ------------------------------------------
@pytest.mark.parametrize("rename", [False, True])
def test_k_a_constructor_default_of_one_is_whole_windows(rename):
    source = DEFAULT_ONE.replace("every", "acc").replace("Loop", "Solver") if rename else DEFAULT_ONE
    assert _same(source, 5, 1)
    assert _lint(source, "GG103") == []


def test_negative_control_k_handed_in_by_the_construction_draws_gg103():
    four = DEFAULT_ONE.replace("Loop(model).run(data)", "Loop(model, every=4).run(data)")
    assert not _same(four, 5, 4)  # the fifth micro-batch is never stepped
    assert _lint(four, "GG103") == ["GG103"]
    positional = DEFAULT_ONE.replace("Loop(model).run(data)", "Loop(model, 0.1, 4).run(data)")
    assert _lint(positional, "GG103") == ["GG103"]


def test_negative_control_constructions_that_differ_decide_nothing():
    both = DEFAULT_ONE.replace("Loop(model).run(data)", "Loop(model).run(data)\n    Loop(model, every=4).run(data)")
    assert _lint(both, "GG103") == ["GG103"]


def test_negative_control_an_attribute_changed_outside_init_is_not_a_literal():
    changed = DEFAULT_ONE.replace("    def run(self, data):\n", "    def run(self, data):\n        self.every = 4\n")
    assert _lint(changed, "GG103") == ["GG103"]


# --- GG103: the data's length through a generator ----------------------------------
def test_a_list_over_a_generator_of_a_literal_length_k_divides_is_whole_windows():
    assert _same(GENERATED, 8, 4)
    assert _lint(GENERATED, "GG103") == []
    renamed = GENERATED.replace("pairs", "items").replace("K", "ACC").replace("opt", "o")
    assert _lint(renamed, "GG103") == []


def test_negative_control_a_length_k_does_not_divide_draws_gg103():
    odd = GENERATED.replace("range(8)", "range(7)")
    assert not _same(odd, 7, 4)
    assert _lint(odd, "GG103") == ["GG103"]


# --- GG111: the step on the window test's negation -----------------------------------
@pytest.mark.parametrize("source", [SWAPPED, SWAPPED_METHOD], ids=["function", "method"])
def test_a_step_on_the_negated_window_test_is_reported(source):
    assert not _same(source, 8, 4)
    assert _lint(source, "GG111") == ["GG111"]
    old, new = FIXED[source]
    twin = source.replace(old, new)
    assert twin != source
    assert _same(twin, 8, 4)
    assert codes(twin) == []


def test_renamed_swapped_keeps_the_verdict():
    renamed = SWAPPED.replace("K", "every").replace("opt", "sgd").replace("main", "go").replace("def go", "def main")
    assert _lint(renamed, "GG111") == ["GG111"]


def test_negative_control_k_two_negated_is_the_other_residue_whole_windows():
    two = SWAPPED.replace("K = 4", "K = 2")
    # steps at i = 1, 3, 5, 7: windows {0, 1}, {2, 3}, ... of 2, each loss divided by 2
    assert _same(two, 8, 2)
    assert _lint(two, "GG111") == []


# --- GG111: windows as slices of the data, the last one short -----------------------------
SLICED = """\
import torch
import torch.nn.functional as F


def main(model, data, K=3):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for start in range(0, len(data), K):
        window = data[start:start + K]
        opt.zero_grad()
        for x, y in window:
            (F.mse_loss(model(x), y) / K).backward()  # DIVISOR
        opt.step()
"""

SLICED_METHOD = """\
import torch
import torch.nn.functional as F


class Windows:
    def __init__(self, net):
        self.net = net
        self.opt = torch.optim.SGD(net.parameters(), lr=0.1)

    def loss(self, a, b, d):
        return F.mse_loss(self.net(a), b) / d

    def go(self, items, size):
        for s in range(0, len(items), size):
            self.opt.zero_grad()
            for a, b in items[s:s + size]:
                self.loss(a, b, size).backward()  # DIVISOR
            self.opt.step()


def main(model, data, K=3):
    Windows(model).go(data, K)
"""

OWN_SIZE = {
    SLICED: ("(F.mse_loss(model(x), y) / K).backward()  # DIVISOR", "(F.mse_loss(model(x), y) / len(window)).backward()"),
    SLICED_METHOD: ("self.loss(a, b, size).backward()  # DIVISOR", "self.loss(a, b, len(items[s:s + size])).backward()"),
}


def _own_reference(n, k):
    """SGD over windows of k, the last one of n % k, each loss divided by its window's size."""
    model, data = _model(), _data()[:n]
    params = [p.detach().clone().requires_grad_() for p in model.parameters()]
    for start in range(0, n, k):
        part = data[start:start + k]
        grads = [torch.zeros_like(p) for p in params]
        for x, y in part:
            out = torch.nn.functional.linear(x, params[0], params[1])
            for g, d in zip(grads, torch.autograd.grad(((out - y) ** 2).mean() / len(part), params)):
                g += d
        params = [(p - 0.1 * g).detach().requires_grad_() for p, g in zip(params, grads)]
    return params


@pytest.mark.parametrize("source", [SLICED, SLICED_METHOD], ids=["function", "method"])
def test_the_last_short_slice_divided_by_k_is_gg111(source):
    namespace = {}
    exec(compile(textwrap.dedent(source), "<train>", "exec"), namespace)
    model = _model()
    namespace["main"](model, _data())  # 8 micro-batches, K = 3: windows of 3, 3, 2
    ref = _own_reference(8, 3)
    assert not all(torch.allclose(a, b, rtol=1e-12, atol=1e-12) for a, b in zip(model.parameters(), ref))
    assert _lint(source, "GG111") == ["GG111"]
    old, new = OWN_SIZE[source]
    twin = source.replace(old, new)
    assert twin != source
    namespace = {}
    exec(compile(textwrap.dedent(twin), "<train>", "exec"), namespace)
    model = _model()
    namespace["main"](model, _data())
    assert all(torch.allclose(a, b, rtol=1e-12, atol=1e-12) for a, b in zip(model.parameters(), ref))
    assert _lint(twin, "GG111") == []


def test_negative_control_a_checked_length_is_whole_slices():
    checked = SLICED.replace("    opt = torch", "    assert len(data) % K == 0\n    opt = torch")
    assert _lint(checked, "GG111") == []
    renamed = SLICED.replace("window", "chunk").replace("start", "i0").replace("opt", "o")
    assert _lint(renamed, "GG111") == ["GG111"]


def test_negative_control_slices_of_a_literal_length_k_divides_are_whole():
    literal = SLICED.replace("def main(model, data, K=3):\n", "def main(model, data):\n    K = 3\n    data = [data[j] for j in range(6)]\n")
    assert _lint(literal, "GG111") == []
    short = SLICED.replace("def main(model, data, K=3):\n", "def main(model, data):\n    K = 3\n    data = [data[j] for j in range(7)]\n")
    assert _lint(short, "GG111") == ["GG111"]
