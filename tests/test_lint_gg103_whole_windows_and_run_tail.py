"""GG103 from what the loops' counts prove: no finding where every window is whole, and the run's
tail reported at the outermost loop where the window count runs on through the epochs.

Whole windows. Four shapes of published loops (GradBench's fixed twins of tt-metal#17568,
OpenPrompt#106, minWM#12 and litgpt#1947) step on a window test and run a number of micro-batches
that the file spells out, a multiple of the window size: rows of a tensor made by a torch factory
(``torch.randn(12, 8, 17)``), a count raised beside the loop's index (``actual_step += 1``), a window
size read through ``getattr(config, "k", 1)`` of a class attribute, a flag set from the modulo
(``is_accumulating = i % K != 0``) with K computed by ``//``. The oracle is the program itself: run,
it leaves gradient in ``.grad`` after the loop exactly when a partial window was dropped, and the
linter says GG103 exactly then (the negative controls change only a count).

The run's tail. A window counter set before the epoch loop and raised in the batch loop (or
computed as ``epoch * len(loader) + i``) carries an epoch's open window into the next epoch, where
it closes whole: no epoch drops anything. Only the run's last window can be left, after the
outermost loop, so that is where GG103 points, and its fix steps once there. Stepping after the
inner loop instead would make every next epoch's first window short: the float64 reference below
(the full-batch gradient of each window of K consecutive micro-batches of the run, the last one
partial) tells the two apart. A clearing at each epoch's start wipes the open window: then each
epoch drops its tail and the finding stays at the batch loop.
"""

from __future__ import annotations

import ast

import pytest
import torch

import gradguard as gg
from gradguard.lint.autofix import fix_source


def _program(template: str, **counts) -> str:
    source = template
    for k, v in counts.items():
        source = source.replace(f"__{k}__", str(v))
    return source


def _left_in_grad(source: str) -> bool:
    """Run the program: does gradient wait in .grad after the loop (a partial window no step applied)?"""
    scope: dict = {}
    torch.manual_seed(0)
    exec(compile(source, "<program>", "exec"), scope)
    return any(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in scope["model"].parameters())


def _gg103(source: str) -> list:
    return [f for f in gg.lint_source(source) if f.code == "GG103"]


# --- whole windows ------------------------------------------------------------------------------

TENSOR_ROWS = """
import torch

width, accumulation_steps, clip = 3, __K__, 0.1
model = torch.nn.Linear(width, 1)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
data = torch.randn(__N__, 2, width)
for i, batch in enumerate(data):
    loss = model(batch).pow(2).mean() / accumulation_steps
    loss.backward()
    if (i + 1) % accumulation_steps == 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        optimizer.zero_grad()
"""

COUNT_BESIDE_INDEX = """
import torch

gradient_accumulation_steps = __K__
model = torch.nn.Linear(3, 1)
optimizer1 = torch.optim.AdamW(model.parameters(), lr=1e-3)
train_dataloader = [(torch.randn(2, 3), torch.randn(2, 1)) for _ in range(__N__)]
actual_step, glb_step, tot_loss = 0, 0, 0.0
for step, (inputs, labels) in enumerate(train_dataloader):
    loss = torch.nn.functional.mse_loss(model(inputs), labels)
    loss = loss / gradient_accumulation_steps
    loss.backward()
    tot_loss += loss.item()
    actual_step += 1
    if actual_step % gradient_accumulation_steps == 0:
        glb_step += 1
        optimizer1.step()
        optimizer1.zero_grad()
"""

GETATTR_CONFIG = """
import torch


class Config:
    grad_accum_steps = __K__
    batch_size = 2


config = Config()
ga = getattr(config, "grad_accum_steps", 1)
model = torch.nn.Linear(3, 3)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(__N__):
    noise = torch.randn(config.batch_size, 3)
    loss = torch.nn.functional.mse_loss(model(noise), noise) / ga
    loss.backward()
    if (step + 1) % ga == 0:
        optimizer.step()
        optimizer.zero_grad()
"""

FLAG_FLOORDIV = """
import torch

global_batch_size, micro_batch_size, devices, num_nodes = 16, 2, 1, __D__
gradient_accumulation_iters = global_batch_size // (devices * num_nodes * micro_batch_size)
model = torch.nn.Linear(3, 1)
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
data = torch.randn(__N__, micro_batch_size, 3)
for iter_num, batch in enumerate(data, start=1):
    is_accumulating = iter_num % gradient_accumulation_iters != 0
    (model(batch).pow(2).mean() / gradient_accumulation_iters).backward()
    if not is_accumulating:
        optimizer.step()
        optimizer.zero_grad()
"""


@pytest.mark.parametrize("k,n", [(4, 12), (4, 8), (3, 12), (4, 13), (4, 10), (5, 12)])
@pytest.mark.parametrize("template", [TENSOR_ROWS, COUNT_BESIDE_INDEX, GETATTR_CONFIG],
                         ids=["tensor-rows", "count-beside-index", "getattr-config"])
def test_whole_windows_follow_the_counts(template, k, n):
    source = _program(template, K=k, N=n)
    left = _left_in_grad(source)
    assert left == (n % k != 0)  # the program's own truth
    assert bool(_gg103(source)) == left


NESTED_ITEMS = """
import torch

gradient_accumulation_steps = __K__
model = torch.nn.Linear(3, 1)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
train_dataloader = [[torch.randn(2, 3), torch.randn(2, 3)] for _ in range(__N__)]
global_steps = 0
for epoch in range(__E__):
    for step, batch in enumerate(train_dataloader):
        for data in batch:
            loss = model(data).pow(2).mean() / gradient_accumulation_steps
            loss.backward()
            global_steps += 1
            if global_steps % gradient_accumulation_steps == 0:
                optimizer.step()
                model.zero_grad()
"""


@pytest.mark.parametrize("k,n,e", [(4, 4, 1), (4, 3, 1), (3, 3, 2), (5, 3, 2), (4, 1, 2)])
def test_items_of_literal_groups_counted_across_the_loops_around(k, n, e):
    # reformer-pytorch's loop (GradBench c131's twin): each batch is a group of micro-batches
    source = _program(NESTED_ITEMS, K=k, N=n, E=e)
    left = _left_in_grad(source)
    assert left == ((2 * n * e) % k != 0)
    assert bool(_gg103(source)) == left


@pytest.mark.parametrize("d,n", [(2, 24), (1, 24), (2, 26), (1, 20)])
def test_a_flag_set_from_the_modulo_and_a_floor_divided_size(d, n):
    source = _program(FLAG_FLOORDIV, D=d, N=n)
    k = 16 // (d * 2)
    left = _left_in_grad(source)
    assert left == (n % k != 0)
    assert bool(_gg103(source)) == left


def _rename(source: str, names: dict, attributes: bool = True) -> str:
    """Every user identifier renamed (names, attributes the file defines, string keys of getattr)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in names:
            node.id = names[node.id]
        elif attributes and isinstance(node, ast.Attribute) and node.attr in names:
            node.attr = names[node.attr]
        elif isinstance(node, ast.ClassDef) and node.name in names:
            node.name = names[node.name]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
            node.value = names[node.value]
    return ast.unparse(tree) + "\n"


_NAMES = {
    "accumulation_steps": "q", "gradient_accumulation_steps": "q", "grad_accum_steps": "q", "ga": "w",
    "gradient_accumulation_iters": "q", "optimizer": "o", "optimizer1": "o", "data": "xs", "train_dataloader": "xs",
    "actual_step": "c", "is_accumulating": "f", "iter_num": "j", "Config": "Box", "config": "b", "model": "model",
}


@pytest.mark.parametrize("template,counts", [
    (TENSOR_ROWS, {"K": 4, "N": 12}), (TENSOR_ROWS, {"K": 4, "N": 13}),
    (COUNT_BESIDE_INDEX, {"K": 4, "N": 12}), (COUNT_BESIDE_INDEX, {"K": 4, "N": 14}),
    (GETATTR_CONFIG, {"K": 4, "N": 12}), (GETATTR_CONFIG, {"K": 5, "N": 12}),
    (FLAG_FLOORDIV, {"D": 2, "N": 24}), (FLAG_FLOORDIV, {"D": 2, "N": 26}),
])
def test_renaming_every_identifier_keeps_the_verdict(template, counts):
    source = _program(template, **counts)
    renamed = _rename(source, _NAMES)
    assert renamed != source
    assert bool(_gg103(renamed)) == bool(_gg103(source)) == _left_in_grad(source)


def test_a_getattr_default_alone_proves_nothing():
    # the class does not set the attribute: getattr's default (1) applies, a window of one; the file
    # proves no count of the class, so the finding is left to the index arithmetic as before
    source = _program(GETATTR_CONFIG, K=4, N=12).replace("grad_accum_steps = 4", "other = 4")
    assert not _left_in_grad(source)
    assert _gg103(source) == _gg103(source.replace('getattr(config, "grad_accum_steps", 1)', "load()"))


# --- the run's tail -------------------------------------------------------------------------------

CARRIED = """
import torch


def train(model, loader, epochs, accumulation_steps, lr):
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    optimizer.zero_grad()
    step = 0
    for epoch in range(epochs):
        for inputs, labels in loader:
            loss = torch.nn.functional.mse_loss(model(inputs), labels)
            loss = loss / accumulation_steps
            loss.backward()
            step += 1
            if step % accumulation_steps == 0:
                optimizer.step()
                optimizer.zero_grad()
"""

FLUSHED = CARRIED + """\
    if step % accumulation_steps != 0:
        for p in model.parameters():
            p.grad.mul_(accumulation_steps / (step % accumulation_steps))
        optimizer.step()
        optimizer.zero_grad()
"""

# what the per-epoch fix would write: a step after the batch loop, inside the epoch loop
STEP_EACH_EPOCH = CARRIED + """\
        if step % accumulation_steps != 0:
            for p in model.parameters():
                p.grad.mul_(accumulation_steps / (step % accumulation_steps))
            optimizer.step()
            optimizer.zero_grad()
"""

CLEARED_EACH_EPOCH = CARRIED.replace(
    "    for epoch in range(epochs):\n", "    for epoch in range(epochs):\n        optimizer.zero_grad()\n")

DERIVED = """
import torch


def train(model, loader, epochs, accumulation_steps, lr):
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for epoch in range(epochs):
        for i, (inputs, labels) in enumerate(loader):
            global_itr = epoch * len(loader) + i
            loss = torch.nn.functional.mse_loss(model(inputs), labels) / accumulation_steps
            loss.backward()
            if (global_itr + 1) % accumulation_steps == 0:
                optimizer.step()
                optimizer.zero_grad()
"""


def _data(n: int):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(3, 4, generator=g, dtype=torch.float64), torch.randn(3, 2, generator=g, dtype=torch.float64))
            for _ in range(n)]


def _model():
    torch.manual_seed(0)
    return torch.nn.Linear(4, 2).double()


def _trained(source: str, loader, epochs: int, k: int, lr: float = 0.1) -> torch.Tensor:
    scope: dict = {}
    exec(compile(source, "<program>", "exec"), scope)
    model = _model()
    scope["train"](model, loader, epochs, k, lr)
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def _reference(loader, epochs: int, k: int, lr: float = 0.1) -> torch.Tensor:
    """Plain PyTorch, float64, full batch: the run's micro-batches in order, in windows of k (the
    last one partial); each step applies the gradient of the mean loss over its window's samples."""
    model = _model()
    run = [b for _ in range(epochs) for b in loader]
    for start in range(0, len(run), k):
        window = run[start:start + k]
        x, y = torch.cat([b[0] for b in window]), torch.cat([b[1] for b in window])
        model.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= lr * p.grad
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def _line_of(source: str, text: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if text in line)


def test_a_run_wide_count_is_reported_at_the_outermost_loop():
    (finding,) = _gg103(CARRIED)
    assert finding.line == _line_of(CARRIED, "for epoch in range(epochs):")
    assert "outermost" in finding.message


@pytest.mark.parametrize("n,epochs,k", [(5, 2, 4), (3, 3, 4), (7, 2, 3)])
def test_the_run_tail_fix_trains_to_the_full_batch_reference(n, epochs, k):
    loader = _data(n)
    reference = _reference(loader, epochs, k)
    assert (n * epochs) % k != 0
    result = fix_source(CARRIED)
    assert [f.code for f in result.fixed] == ["GG103"]
    assert _gg103(result.text) == []
    # the fix sits after the epoch loop, at the function's indentation
    assert "\n    if step % accumulation_steps != 0:" in result.text
    assert torch.allclose(_trained(result.text, loader, epochs, k), reference, rtol=0, atol=1e-12)
    # negative controls: the unfixed loop drops the run's last window, and a step after each epoch's
    # batch loop gives every next epoch a short first window: neither trains to the reference
    assert not torch.allclose(_trained(CARRIED, loader, epochs, k), reference, rtol=0, atol=1e-6)
    assert not torch.allclose(_trained(STEP_EACH_EPOCH, loader, epochs, k), reference, rtol=0, atol=1e-6)


def test_a_correct_run_tail_is_left_alone():
    loader = _data(5)
    assert _gg103(FLUSHED) == []
    assert fix_source(FLUSHED).text == FLUSHED
    assert torch.allclose(_trained(FLUSHED, loader, 2, 4), _reference(loader, 2, 4), rtol=0, atol=1e-12)


def test_a_clearing_at_each_epoch_start_keeps_the_finding_at_the_batch_loop():
    # the open window is wiped at the next epoch's start: each epoch drops its tail
    (finding,) = _gg103(CLEARED_EACH_EPOCH)
    assert finding.line == _line_of(CLEARED_EACH_EPOCH, "for inputs, labels in loader:")
    assert finding.fix is None  # the run-tail fix would not restore the wiped windows


def test_a_count_computed_from_the_epoch_and_the_index_is_a_run_wide_count():
    (finding,) = _gg103(DERIVED)
    assert finding.line == _line_of(DERIVED, "for epoch in range(epochs):")
    assert finding.fix is None  # `global_itr` is unbound after an empty run: not proven, not offered


@pytest.mark.parametrize("rewrite", [
    lambda s: _rename(s, {"step": "seen", "optimizer": "o", "accumulation_steps": "q", "loader": "xs",
                          "train": "train", "epoch": "e", "inputs": "a", "labels": "b"}, attributes=False),
    # the micro-batch's work in a helper
    lambda s: s.replace(
        "            loss = torch.nn.functional.mse_loss(model(inputs), labels)\n"
        "            loss = loss / accumulation_steps\n"
        "            loss.backward()\n",
        "            micro(model, inputs, labels, accumulation_steps)\n").replace(
        "def train(", "def micro(model, x, y, q):\n    (torch.nn.functional.mse_loss(model(x), y) / q).backward()\n\n\ndef train("),
    # unrelated code beside the loops
    lambda s: s.replace("            step += 1\n", "            step += 1\n            print(loss.item())\n"),
], ids=["renamed", "helper", "logging"])
def test_rewrites_keep_the_run_tail_verdict(rewrite):
    for source, outer in ((CARRIED, True), (CLEARED_EACH_EPOCH, False), (FLUSHED, None)):
        new = rewrite(source)
        assert new != source
        found = _gg103(new)
        if outer is None:
            assert found == []
            continue
        (finding,) = found
        first_for = [n for n in ast.walk(ast.parse(new)) if isinstance(n, ast.For)]
        outer_line = min(n.lineno for n in first_for)
        assert (finding.line == outer_line) == outer


# --- a run that ends on a count of steps ------------------------------------------------------------

UNTIL_MAX_STEPS = """
import torch


def train(model, loader, K, max_steps):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    global_step, local_step = 0, 0
    while global_step < max_steps:
        for x, y in loader:
            if global_step >= max_steps:
                break
            loss = torch.nn.functional.mse_loss(model(x), y) / K
            loss.backward()
            local_step += 1
            if local_step % K == 0:
                opt.step()
                opt.zero_grad()
                global_step += 1
"""


def _pending_after(source: str, n: int, k: int, max_steps: int) -> bool:
    scope: dict = {}
    exec(compile(source, "<program>", "exec"), scope)
    model = _model()
    scope["train"](model, _data(n), k, max_steps)
    return any(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in model.parameters())


def test_a_while_loop_on_the_step_count_left_by_the_batch_loop_ends_right_after_a_step():
    # the batch loop breaks off on the negation of the while's test, a count raised only at a step
    for n, k, max_steps in ((3, 4, 5), (5, 2, 7), (7, 3, 4)):
        assert not _pending_after(UNTIL_MAX_STEPS, n, k, max_steps)
    assert _gg103(UNTIL_MAX_STEPS) == []


@pytest.mark.parametrize("change", [
    # no break in the batch loop: the pass over the loader goes on after the last step
    ("            if global_step >= max_steps:\n                break\n", ""),
    # a break on a count of micro-batches (ending the run too): it may come in the middle of a window
    ("if global_step >= max_steps:\n                break", "if local_step >= 2 * max_steps + 1:\n                return"),
])
def test_a_while_loop_that_may_end_inside_a_window_is_reported_at_the_while(change):
    source = UNTIL_MAX_STEPS.replace(*change)
    assert source != UNTIL_MAX_STEPS
    assert any(_pending_after(source, n, k, m) for n, k, m in ((3, 4, 5), (5, 2, 7), (7, 3, 4), (5, 3, 7)))
    (finding,) = _gg103(source)
    assert finding.line == _line_of(source, "while global_step < max_steps:")
