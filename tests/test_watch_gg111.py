"""GG111 underscaled window at run time: the final partial window divided by the full window's size.

The reference is plain PyTorch in float64: the gradient of the mean loss over the
items of the last window. The bad loop's last step gets K'/K of it (and is
reported), the fixed loop gets all of it (and is clean), in the same test.
"""

import json

import pytest
import torch
import torch.nn.functional as F

import gradguard as gg
from gradguard.cli import main

from _scripts import SCRIPTS, alone


def _data(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(6, 5, generator=g), torch.randn(6, 1, generator=g)) for _ in range(n)]


def _loop(data, accum, divisor, record_last=None):
    """SGD(lr=0) over ``data`` in windows of ``accum``, stepping the remainder; each loss divided by
    ``divisor(window_size)``. Returns the watch's codes and the last step's gradient."""
    torch.manual_seed(1)
    model = torch.nn.Linear(5, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # lr 0: every window sees the same weights
    n = len(data)
    last = None
    with gg.watch(mode="record") as w:
        for i, (x, y) in enumerate(data):
            window = min(accum, n - (i // accum) * accum)
            (F.mse_loss(model(x), y) / divisor(accum, window)).backward()
            if (i + 1) % accum == 0 or i == n - 1:
                last = [p.grad.detach().clone() for p in model.parameters()]
                opt.step()
                opt.zero_grad()
    return [f.code for f in w.findings], last, model


def _reference(model, batches):
    """float64 gradient of the mean loss over every item of ``batches`` (equal micro-batch sizes)."""
    ref = torch.nn.Linear(5, 1).double()
    ref.load_state_dict(model.state_dict())
    x = torch.cat([b[0] for b in batches]).double()
    y = torch.cat([b[1] for b in batches]).double()
    F.mse_loss(ref(x), y).backward()
    return [p.grad for p in ref.parameters()]


@pytest.mark.parametrize("n, accum", [(10, 4), (9, 4), (7, 3)])
def test_underscaled_final_window_is_reported_and_the_fixed_loop_is_exact(n, accum):
    data = _data(n)
    k_last = n - (n - 1) // accum * accum
    codes, bad_grad, model = _loop(data, accum, lambda k, window: k)
    ref = _reference(model, data[n - k_last:])
    for g, r in zip(bad_grad, ref):  # the bug, measured: K'/K of the mean
        torch.testing.assert_close(g.double(), r * k_last / accum, rtol=1e-5, atol=1e-7)
    assert codes == ["GG111"]
    codes, good_grad, model = _loop(data, accum, lambda k, window: window)
    for g, r in zip(good_grad, ref):
        torch.testing.assert_close(g.double(), r, rtol=1e-5, atol=1e-7)
    assert codes == []


def test_windows_that_change_size_with_their_divisor_are_clean():
    # Windows of 4 divided by 4, then windows of 2 divided by 2 (an accumulation schedule): exact.
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with gg.watch(mode="record") as w:
        for accum in (4, 4, 2, 2, 3):
            for x, y in _data(accum, seed=accum):
                (F.mse_loss(model(x), y) / accum).backward()
            opt.step()
            opt.zero_grad()
    assert w.findings == []


def test_a_lone_short_window_says_nothing_and_one_leftover_pass_is_reported():
    # No full window seen before: K is unknown, nothing is claimed.
    codes, _, _ = _loop(_data(3), 4, lambda k, window: k)
    assert codes == []
    # A remainder of one micro-batch divided by 4: reported.
    codes, _, _ = _loop(_data(9), 4, lambda k, window: k)
    assert codes == ["GG111"]


def test_the_accumulator_flush_is_not_underscaled():
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 1)
    acc = gg.Accumulator(torch.optim.SGD(model.parameters(), lr=0.01), steps=4)
    with gg.watch(mode="record") as w:
        for x, y in _data(10):
            acc.backward(F.mse_loss(model(x), y))
            acc.step()
        acc.flush()
    assert w.findings == []


def test_script_pair(tmp_path):
    for name, expected in (("gg111_bad.py", ["GG111"]), ("gg111_good.py", [])):
        report = tmp_path / f"{name}.json"
        assert main(["run", "--mode", "record", "--report", str(report), *alone("GG111"), str(SCRIPTS / name)]) == 0
        findings = json.loads(report.read_text())
        assert [f["code"] for f in findings] == expected
    line = next(i for i, t in enumerate((SCRIPTS / "gg111_bad.py").read_text().splitlines(), 1) if "# BUG" in t)
    assert findings == [] and json.loads((tmp_path / "gg111_bad.py.json").read_text())[0]["line"] == line
    assert json.loads((tmp_path / "gg111_bad.py.json").read_text())[0]["step"] == 3


def _first_window_early(data, accum, fixed):
    """The LLMs-from-scratch loop: each loss divided by ``accum``, a step when ``i % accum == 0`` (so at i = 0,
    on one micro-batch); fixed: a step when ``(i + 1) % accum == 0`` or at the last batch, the last window
    divided by its own size. SGD(lr=0). Returns the codes with their steps and the gradient of each step."""
    torch.manual_seed(1)
    model = torch.nn.Linear(5, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    n, grads = len(data), []
    with gg.watch(mode="record") as w:
        for i, (x, y) in enumerate(data):
            window = min(accum, n - (i // accum) * accum) if fixed else accum
            (F.mse_loss(model(x), y) / window).backward()
            if ((i + 1) % accum == 0 or i == n - 1) if fixed else (i % accum == 0):
                grads.append([p.grad.detach().clone() for p in model.parameters()])
                opt.step()
                opt.zero_grad()
    return [(f.code, f.step) for f in w.findings], grads, model


def test_a_first_window_closed_after_one_micro_batch_is_reported_at_step_1():
    data = _data(9)
    codes, grads, model = _first_window_early(data, 4, fixed=False)
    for g, r in zip(grads[0], _reference(model, data[:1])):  # the bug, measured: 1/4 of the mean
        torch.testing.assert_close(g.double(), r / 4, rtol=1e-5, atol=1e-7)
    for g, r in zip(grads[1], _reference(model, data[1:5])):  # the next window, 4 passes divided by 4: exact
        torch.testing.assert_close(g.double(), r, rtol=1e-5, atol=1e-7)
    assert codes == [("GG111", 1)]  # reported when the window of 4 (step 2) shows what the divisor 4 was
    codes, grads, model = _first_window_early(data, 4, fixed=True)
    assert codes == []
    for g, r in zip(grads[2], _reference(model, data[8:])):
        torch.testing.assert_close(g.double(), r, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("divisor", [2.0, 4, 0.5])
def test_a_constant_divisor_with_one_pass_per_step_is_silent(divisor):
    # A temperature or a fixed normaliser, one backward pass per step: no window of `divisor` passes ever
    # shows that it was a window size.
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with gg.watch(mode="record") as w:
        for x, y in _data(12):
            (F.mse_loss(model(x), y) / divisor).backward()
            opt.step()
            opt.zero_grad()
    assert w.findings == []


def test_a_short_window_divided_by_its_own_size_before_full_ones_is_silent():
    # A warm-up window of 2 divided by 2, then windows of 4 divided by 4: every window exact.
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with gg.watch(mode="record") as w:
        for accum in (1, 2, 4, 4):
            for x, y in _data(accum, seed=accum):
                (F.mse_loss(model(x), y) / accum).backward()
            opt.step()
            opt.zero_grad()
    assert w.findings == []
