"""GG102 for a zero_grad() left in a loop that a gradguard Accumulator steps, decided from the program's structure.

The Accumulator is the object an ``Accumulator(...)`` call built (over the optimizer the loop
clears, or the model that optimizer holds), whatever its name; a name that merely sounds like one
is not. The fixture pair is tests/lint_fixtures/ported_to_accumulator.py / ok_accumulator.py.
"""

import pytest

import gradguard as gg

PORTED = """
import torch
import gradguard as gg


def train(model, loader):
    optimizer = torch.optim.AdamW(model.parameters())
    acc = gg.Accumulator(optimizer, steps=4)
    for x, y in loader:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        acc.backward(loss, count=len(y))
        acc.step()
"""

RENAMED = """
import torch
import gradguard


def log(value):
    print(value)


def fit(net, batches, k):
    o = torch.optim.SGD(net.parameters(), lr=0.1)
    engine_like = gradguard.Accumulator(o, k)
    seen = 0
    for inputs, targets in batches:
        seen += len(targets)
        o.zero_grad()
        engine_like.backward(torch.nn.functional.mse_loss(net(inputs), targets), count=len(targets))
        if engine_like.step():
            log(seen)
"""

NOT_AN_ACCUMULATOR = """
import torch
from accelerate import Accelerator


def train(model, loader):
    optimizer = torch.optim.AdamW(model.parameters())
    acc = Accelerator()
    model, optimizer = acc.prepare(model, optimizer)
    for x, y in loader:
        optimizer.zero_grad()
        acc.backward(torch.nn.functional.cross_entropy(model(x), y))
        optimizer.step()
"""

ONE_STEP = PORTED.replace("steps=4", "steps=1")


def _gg102(source):
    return [(f.code, f.line) for f in gg.lint_source(source) if f.code == "GG102"]


def test_the_clearing_is_reported_at_its_line():
    assert _gg102(PORTED) == [("GG102", 10)]


def test_names_helpers_and_unrelated_code_do_not_change_the_verdict():
    assert _gg102(RENAMED) == [("GG102", 16)]


@pytest.mark.parametrize("source", [NOT_AN_ACCUMULATOR, ONE_STEP], ids=["named-acc-but-an-Accelerator", "steps=1"])
def test_no_finding_where_nothing_of_a_window_is_lost(source):
    assert _gg102(source) == []


def test_the_fix_deletes_the_clearing():
    from gradguard.lint.autofix import fix_source

    fixed = fix_source(PORTED).text
    assert "zero_grad" not in fixed and "acc.backward(loss, count=len(y))" in fixed and _gg102(fixed) == []
