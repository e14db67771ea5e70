"""GG103 where the counts are handed to the training function at its call: no partial window is
left when every run ends on a step.

Published training functions (the transformers example scripts, GSM's and ECO-pytorch's
``train()``, as GradBench reduces them) take the window size and the data as parameters:
``train(args, loader, model)``, called once in the file with ``Args()`` (a class whose body
sets ``gradient_accumulation_steps = 4``) and a list of 8 batches. Inside the function nothing
binds ``args`` or ``loader``, so the linter could not prove the windows whole and said GG103 on
correct code. The value of a parameter is now the one value every call of the function in the
file hands in (or the default it leaves in place).

The oracle is the program itself: run, it leaves gradient in ``.grad`` after the loop exactly
when a partial window was dropped, and the linter must say GG103 exactly then. The negative
controls change only a count (the verdict follows the numbers), and a parameter the file does
not pin down (calls that differ, a function handed on by name) stays reported.
"""

from __future__ import annotations

import pytest
import torch

import gradguard as gg

POSITIONAL = """
import torch


class Args:
    gradient_accumulation_steps = __K__


def train(args, loader, model, optimizer):
    for step, x in enumerate(loader):
        loss = model(x).pow(2).mean() / args.gradient_accumulation_steps
        loss.backward()
        if (step + 1) % args.gradient_accumulation_steps == 0:
            optimizer.step()
            optimizer.zero_grad()


model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = [torch.randn(2, 4) for _ in range(__N__)]
train(Args(), data, model, optimizer)
"""

# the same, rewritten: keywords at the call, the window size a parameter's default, a counter from 0
KEYWORDS = """
import torch


def fit(model, optimizer, batches, accum=__K__):
    for i, x in enumerate(batches):
        (model(x).pow(2).mean() / accum).backward()
        if i % accum == accum - 1:
            optimizer.step()
            optimizer.zero_grad()


model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
fit(batches=[torch.randn(2, 4) for _ in range(__N__)], optimizer=optimizer, model=model)
"""

# ECO-pytorch's form: the step at the start of each window (`i % K == 0`), so the last batch steps
# only where N - 1 is a multiple of K
START_OF_WINDOW = """
import torch


class Args:
    iter_size = __K__


def train(train_loader, model, optimizer, args):
    optimizer.zero_grad()
    for i, x in enumerate(train_loader):
        model(x).pow(2).mean().backward()
        if i % args.iter_size == 0:
            optimizer.step()
            optimizer.zero_grad()


model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
train_loader = [torch.randn(2, 4) for _ in range(__N__)]
train(train_loader, model, optimizer, Args())
"""


def _program(template, **counts):
    source = template
    for k, v in counts.items():
        source = source.replace(f"__{k}__", str(v))
    return source


def _left_in_grad(source) -> bool:
    """Run the program: does gradient wait in .grad after the loop (a partial window no step applied)?"""
    scope: dict = {}
    torch.manual_seed(0)
    exec(compile(source, "<program>", "exec"), scope)
    return any(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in scope["model"].parameters())


def _gg103(source) -> bool:
    return any(f.code == "GG103" for f in gg.lint_source(source))


@pytest.mark.parametrize("template", [POSITIONAL, KEYWORDS], ids=["positional", "keywords-default"])
@pytest.mark.parametrize("k,n", [(4, 8), (4, 16), (3, 9), (4, 10), (3, 8)])
def test_counts_handed_in_at_the_call_are_read(template, k, n):
    source = _program(template, K=k, N=n)
    left = _left_in_grad(source)
    assert left == (n % k != 0)
    assert _gg103(source) == left


@pytest.mark.parametrize("k,n", [(4, 13), (4, 9), (2, 5), (4, 12), (4, 8)])
def test_a_window_stepped_at_its_start_is_read_from_the_call(k, n):
    source = _program(START_OF_WINDOW, K=k, N=n)
    left = _left_in_grad(source)
    assert left == ((n - 1) % k != 0)
    assert _gg103(source) == left


def test_calls_that_hand_in_different_counts_stay_reported():
    # one call's window fits, the other's does not: the parameter is not one value, nothing is proved
    source = _program(POSITIONAL, K=4, N=8) + "train(Args(), data[:6], model, optimizer)\n"
    assert _left_in_grad(source)
    assert _gg103(source)


def test_a_function_handed_on_by_name_stays_reported():
    # a caller outside the file may hand in anything: `callbacks = [train]`
    source = _program(POSITIONAL, K=4, N=8) + "callbacks = [train]\n"
    assert not _left_in_grad(source)
    assert _gg103(source)


def test_a_name_the_function_rebinds_is_not_read_from_the_caller():
    # `loader` is rebound inside: the caller's list says nothing about what the loop runs over
    source = _program(POSITIONAL, K=4, N=8).replace(
        "    for step, x in enumerate(loader):", "    loader = list(loader) + list(loader)[:2]\n    for step, x in enumerate(loader):")
    assert _left_in_grad(source)
    assert _gg103(source)


def test_a_value_read_at_run_time_stays_reported():
    source = _program(POSITIONAL, K=4, N=8).replace("train(Args(), data,", "import sys\ntrain(Args(), data[: len(sys.argv) * 0 + 8],")
    assert not _left_in_grad(source)
    assert _gg103(source)  # a slice computed at run time: its length is not read
