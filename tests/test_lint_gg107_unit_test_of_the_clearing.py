"""GG107: a unit test that fills ``.grad``, clears with ``zero_grad(set_to_none=False)`` and asserts zeros.

No optimizer step follows in the function, so no parameter is moved by a zero gradient: the clearing's
zeros are what the test reads. Run in float64: the weights are unchanged (the truth) and the linter is
silent. Negative controls, still reported: the same function stepping AdamW after the clearing (the zero
gradient still moves the weights: the decay), directly or under a later test.
"""

from __future__ import annotations

import re
import textwrap

import torch

from _findings import codes

GOOD = """\
import torch
from torch import nn


def test_zero_grad_delegates():
    layer = nn.Linear(4, 4).double()
    opt = torch.optim.AdamW(layer.parameters(), lr=1e-1, weight_decay=0.1)
    layer.weight.grad = torch.ones_like(layer.weight)
    layer.bias.grad = torch.ones_like(layer.bias)
    opt.zero_grad(set_to_none=False)
    assert layer.weight.grad is not None and layer.weight.grad.abs().sum().item() == 0.0
    return layer
"""
STEPS = GOOD.replace("    return layer\n", "    opt.step()\n    return layer\n")
# the step under a later test of the same function
BRANCH = GOOD.replace("    return layer\n", "    if layer.weight.grad.abs().sum().item() == 0.0:\n        opt.step()\n    return layer\n")


def _gg107(source):
    return [c for c in codes(source) if c == "GG107"]


def _moved(source) -> bool:
    namespace = {}
    exec(compile(textwrap.dedent(source), "<test>", "exec"), namespace)
    torch.manual_seed(0)
    layer = namespace["test_zero_grad_delegates"]()
    torch.manual_seed(0)
    fresh = torch.nn.Linear(4, 4).double()
    return not torch.equal(layer.weight, fresh.weight)


def test_a_unit_test_of_the_clearing_is_not_reported():
    assert not _moved(GOOD)
    assert _gg107(GOOD) == []


def test_negative_controls_a_step_after_the_zeros_is_reported():
    assert _moved(STEPS)
    assert "GG107" in _gg107(STEPS)
    assert _moved(BRANCH)
    assert "GG107" in _gg107(BRANCH)


def test_renamed_keeps_the_verdict():
    for source, found in ((GOOD, []), (STEPS, ["GG107"])):
        renamed = re.sub(r"\blayer\b", "lin", re.sub(r"\bopt\b", "adam", source))
        assert renamed != source and _gg107(renamed) == found
