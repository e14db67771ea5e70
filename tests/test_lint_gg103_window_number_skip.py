"""GG103 and a skip of the micro-batches past a whole number of windows.

Engines of the ConvNeXt/BEiT family train ``n`` whole windows an epoch and skip the micro-batches past
them before any backward pass (``step = i // K; if step >= n: continue``). The skip test reads the index
only through its window number, so it starts on a window boundary: nothing is left in ``.grad`` for a
remainder step. The same skip on the micro-batch index itself (``if i >= n: continue``) may start inside a
window, and then the partial window's gradients are never applied. Each program is run in float64 and the
verdict is compared with what the run leaves unapplied in ``.grad``.
"""

import textwrap

import pytest
import torch

import gradguard

TEMPLATE = '''
import torch

def {fn}({model}, {data}, {opt}, {k}, {n}):
    {opt}.zero_grad()
    for {i}, ({x}, {y}) in enumerate({data}):
        {w} = {i_expr}
        if {w} >= {n}:
            continue
        {loss} = torch.nn.functional.mse_loss({model}({x}), {y})
        {loss} /= {k}
        {loss}.backward()
        if ({i} + 1) % {k} == 0:
            {opt}.step()
            {opt}.zero_grad()
'''

NAMES = [
    dict(fn="train_one_epoch", model="model", data="data_loader", opt="optimizer", k="update_freq",
         n="num_training_steps_per_epoch", i="data_iter_step", x="samples", y="targets", w="step", loss="loss"),
    dict(fn="f", model="m", data="d", opt="o", k="a", n="lim", i="j", x="u", y="v", w="s", loss="l"),
]


def _program(names, by_window):
    i_expr = f"{names['i']} // {names['k']}" if by_window else names["i"]
    return textwrap.dedent(TEMPLATE.format(i_expr=i_expr, **names))


def _codes(src):
    return {d.code for d in gradguard.lint_source(src, "t.py")}


def _left_in_grad(src, names, k, n, batches=10):
    """Run the program in float64; True when gradients are left in `.grad` that no step applied."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1).double()
    data = [(torch.randn(2, 3, dtype=torch.float64), torch.randn(2, 1, dtype=torch.float64)) for _ in range(batches)]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scope = {}
    exec(compile(src, "t.py", "exec"), scope)
    scope[names["fn"]](model, data, opt, k, n)
    return any(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in model.parameters())


@pytest.mark.parametrize("names", NAMES)
def test_a_skip_on_the_window_number_leaves_no_partial_window(names):
    src = _program(names, by_window=True)
    # 10 micro-batches, windows of 4, n = 10 // 4 = 2 whole windows: the run leaves nothing unapplied
    assert not _left_in_grad(src, names, k=4, n=2)
    assert "GG103" not in _codes(src)


@pytest.mark.parametrize("names", NAMES)
def test_negative_control_a_skip_on_the_micro_batch_index_is_still_reported(names):
    src = _program(names, by_window=False)
    # the same skip on the micro-batch index at 6: micro-batches 4 and 5 stay in `.grad`, never applied
    assert _left_in_grad(src, names, k=4, n=6)
    assert "GG103" in _codes(src)


def test_negative_control_the_loop_without_the_skip_is_still_reported():
    src = _program(NAMES[0], by_window=True).replace(
        "        if step >= num_training_steps_per_epoch:\n            continue\n", "")
    assert "continue" not in src
    assert "GG103" in _codes(src)
