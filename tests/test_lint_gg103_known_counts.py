"""GG103 where the file spells out the counts: no partial window is left when every run ends on a step.

Two forms from published loops (SimCSE's unsupervised script, PyTorch-YOLOv3's
train.py, as GradBench reduces them) drew GG103 on their correct versions:

- the window size is an attribute of ``argparse.Namespace(k=4)`` (or
  ``types.SimpleNamespace``): the standard library's attribute bag, whose attributes
  are its keywords;
- the window counter is computed afresh in each iteration from the loop indices
  (``batches_done = len(dataloader) * epoch + batch_i``).

The oracle is the program itself: run, it leaves gradient in ``.grad`` after the loop
exactly when a partial window was dropped, and the linter must say GG103 exactly then.
The negative controls change only a count (the verdict follows the numbers, not the
shape), and a window size read at run time stays reported.
"""

from __future__ import annotations

import pytest
import torch

import gradguard as gg

NAMESPACE = """
import argparse
import torch

args = argparse.Namespace(gradient_accumulation_steps=__K__)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = [torch.randn(2, 4) for _ in range(__N__)]
for step, x in enumerate(data):
    loss = model(x).pow(2).mean() / args.gradient_accumulation_steps
    loss.backward()
    if (step + 1) % args.gradient_accumulation_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
"""

SIMPLE = NAMESPACE.replace("import argparse\n", "from types import SimpleNamespace as Config\n").replace(
    "argparse.Namespace(", "Config(")

RUNTIME = NAMESPACE.replace("args = argparse.Namespace(gradient_accumulation_steps=__K__)",
                            "args = argparse.ArgumentParser().parse_args([])\nargs.gradient_accumulation_steps = __K__")

GLOBAL_COUNTER = """
import types
import torch

opt = types.SimpleNamespace(epochs=__E__, gradient_accumulations=__K__)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
dataloader = [(None, torch.randn(2, 4)) for _ in range(__N__)]
for epoch in range(opt.epochs):
    for batch_i, (_, imgs) in enumerate(dataloader):
        batches_done = len(dataloader) * epoch + batch_i
        loss = model(imgs).pow(2).mean() / opt.gradient_accumulations
        loss.backward()
        if (batches_done + 1) % opt.gradient_accumulations == 0:
            optimizer.step()
            optimizer.zero_grad()
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


@pytest.mark.parametrize("template", [NAMESPACE, SIMPLE], ids=["argparse", "SimpleNamespace"])
@pytest.mark.parametrize("k,n", [(4, 16), (4, 8), (4, 10), (3, 16)])
def test_a_namespace_window_size_is_read(template, k, n):
    source = _program(template, K=k, N=n)
    left = _left_in_grad(source)
    assert left == (n % k != 0)
    assert _gg103(source) == left


def test_a_window_size_read_at_run_time_stays_reported():
    source = _program(RUNTIME, K=4, N=16)
    assert not _left_in_grad(source)
    assert _gg103(source)  # nothing in the file proves the count (the attribute is set outside a constructor)


@pytest.mark.parametrize("e,k,n", [(2, 4, 8), (3, 4, 4), (1, 2, 6), (2, 4, 5), (2, 3, 8)])
def test_a_counter_computed_from_the_loop_indices_is_read(e, k, n):
    source = _program(GLOBAL_COUNTER, E=e, K=k, N=n)
    left = _left_in_grad(source)
    assert left == ((e * n) % k != 0)
    assert _gg103(source) == left


def test_the_counter_rewritten_through_a_helper_name_keeps_the_verdict():
    # the counter's formula split across a bound length and a product: not all names are indices, so
    # the file's proof is not read, and the finding stays (conservative)
    source = _program(GLOBAL_COUNTER, E=2, K=4, N=8).replace(
        "batches_done = len(dataloader) * epoch + batch_i", "per_epoch = len(dataloader)\n        batches_done = per_epoch * epoch + batch_i")
    assert not _left_in_grad(source)
    assert _gg103(source)
