"""GG102 at the first clearing that throws away a gradguard Accumulator's pending window.

A pass made through ``acc.backward()`` belongs to a window that only the Accumulator's own step
(or its own drop) ends; a clearing it did not make before then (a ``zero_grad()`` left at the top
of a ported loop) is reported at that line the first time, not after the three step intervals a
hand loop needs to tell a bug from a deliberate skip. The Accumulator refuses the window as well,
at its end (tests/test_accumulate_self_checks.py); here the watch's side.
"""

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import gradguard as gg

from _scripts import SCRIPTS, alone, run_script


def _line_of(path: Path, marker: str) -> int:
    return next(i for i, text in enumerate(path.read_text().splitlines(), 1) if marker in text)


@pytest.mark.parametrize("twin", ["bad", "good"])
def test_the_script_pair(tmp_path, twin):
    script = SCRIPTS / f"gg102_accumulator_{twin}.py"
    found = [(f["code"], f["line"], f["step"]) for f in run_script(tmp_path, script, *alone("GG102"), report="r.json")[1]]
    assert found == ([("GG102", _line_of(script, "# BUG"), 1)] if twin == "bad" else [])


def _loop(clear, steps=3, windows=2, at=None):
    """An Accumulator loop; ``clear(opt, model)`` runs before the backward of micro-batch ``at`` (None: every one).
    Returns the watch and the Accumulator's refusals."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    acc = gg.Accumulator(opt, steps=steps)
    refused = []
    with gg.watch(mode="record") as w:
        for i in range(steps * windows):
            if at is None or i % steps == at:
                clear(opt, model)
            x, y = torch.randn(2 + i % 3, 6), torch.randint(0, 3, (2 + i % 3,))
            acc.backward(F.cross_entropy(model(x), y), count=len(x))
            try:
                acc.step()
            except gg.GradguardError:
                refused.append(i)
    return w, refused


@pytest.mark.parametrize("clear", [lambda opt, model: opt.zero_grad(), lambda opt, model: model.zero_grad(),
                                   lambda opt, model: opt.zero_grad(set_to_none=False)],
                         ids=["optimizer", "module", "set_to_none=False"])
def test_a_clearing_of_a_pending_window_is_reported_the_first_time(clear):
    w, refused = _loop(clear, at=1)
    assert [(f.code, f.step) for f in w.findings] == [("GG102", 1)]
    assert "Accumulator's backward pass" in w.findings[0].detail
    assert refused == [2, 5]  # the Accumulator refuses each such window too, at its end


def test_raise_mode_stops_at_the_clearing_before_the_accumulator_sees_it():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    acc = gg.Accumulator(opt, steps=2)
    with gg.watch(mode="raise"):
        acc.backward(F.mse_loss(model(torch.randn(2, 3)), torch.randn(2, 1)), count=2)
        acc.step()
        with pytest.raises(gg.GradientBugError, match="GG102"):
            opt.zero_grad()


def test_clearing_before_a_windows_first_micro_batch_is_silent():
    # Negative control: nothing is pending there (the Accumulator cleared after its step).
    w, refused = _loop(lambda opt, model: opt.zero_grad(), at=0, windows=4)
    assert w.findings == [] and refused == []
