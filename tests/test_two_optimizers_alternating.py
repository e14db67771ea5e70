"""A module held by two optimizers, told apart by what runs between the two steps (watch and linter).

One backward pass, then both steps (the same gradient applied twice): the module sits in two optimizers;
the fix is one optimizer per parameter, and clearing the first optimizer's gradients right after its step
does the same (checked: the module then moves exactly as with one optimizer). A backward pass of a second
loss between the two steps (alternating training, each optimizer meant to apply its own loss): the module
belongs in both, and the missing piece is the clearing after the first step. The reference is plain
PyTorch: each loss's gradient taken with ``torch.autograd.grad`` and applied by hand.
"""

from __future__ import annotations

import torch

import gradguard as gg
from _findings import codes

LR = 0.1


def _modules():
    torch.manual_seed(0)
    return torch.nn.Linear(4, 4), torch.nn.Linear(4, 1), torch.nn.Linear(4, 1)


def _alternating(clear_between: bool, watch: bool = True):
    enc, h1, h2 = _modules()
    o1 = torch.optim.SGD(list(enc.parameters()) + list(h1.parameters()), lr=LR)
    o2 = torch.optim.SGD(list(enc.parameters()) + list(h2.parameters()), lr=LR)
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(1))
    with gg.watch(mode="record") as w:
        h1(enc(x)).pow(2).mean().backward()
        o1.step()
        if clear_between:
            o1.zero_grad()
        h2(enc(x)).pow(2).mean().backward()
        o2.step()
        o1.zero_grad()
        o2.zero_grad()
    return w.findings, enc.weight.detach().clone()


def _alternating_reference():
    """Each loss's gradient applied once, by its own optimizer, in order."""
    enc, h1, h2 = _modules()
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(1))
    params1 = list(enc.parameters()) + list(h1.parameters())
    g1 = torch.autograd.grad(h1(enc(x)).pow(2).mean(), params1)
    with torch.no_grad():
        for p, g in zip(params1, g1):
            p -= LR * g
    params2 = list(enc.parameters()) + list(h2.parameters())
    g2 = torch.autograd.grad(h2(enc(x)).pow(2).mean(), params2)
    with torch.no_grad():
        for p, g in zip(params2, g2):
            p -= LR * g
    return enc.weight.detach().clone()


def test_alternating_losses_get_the_clearing_fix_and_it_is_right():
    findings, moved = _alternating(clear_between=False)
    assert [f.code for f in findings] == ["GG101"]
    assert "sit in two optimizers" not in findings[0].message
    assert "zero_grad()" in findings[0].message  # the plain stale-gradient fix: clear once per update
    fixed_findings, fixed = _alternating(clear_between=True)
    assert fixed_findings == []
    reference = _alternating_reference()
    torch.testing.assert_close(fixed, reference, rtol=0, atol=1e-7)
    assert not torch.allclose(moved, reference, atol=1e-4)  # negative control: the bug moved it elsewhere


def _combined(clear_first: bool, shared: bool = True):
    enc, h1, h2 = _modules()
    o1 = torch.optim.SGD(list(enc.parameters()) + list(h1.parameters()), lr=LR)
    o2 = torch.optim.SGD((list(enc.parameters()) if shared else []) + list(h2.parameters()), lr=LR)
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(1))
    with gg.watch(mode="record") as w:
        z = enc(x)
        (h1(z).pow(2).mean() + h2(z).pow(2).mean()).backward()
        o1.step()
        if clear_first:
            o1.zero_grad()
        o2.step()
        o1.zero_grad()
        o2.zero_grad()
    return w.findings, [p.detach().clone() for m in (enc, h1, h2) for p in m.parameters()]


def test_one_pass_two_steps_names_two_optimizers_and_both_fixes_agree():
    findings, _ = _combined(clear_first=False)
    assert [f.code for f in findings] == ["GG101"]
    message = findings[0].message
    assert "sit in two optimizers" in message and "Give each parameter one optimizer" in message
    assert "drop one loss" not in message  # the old claim, false: nothing is dropped
    # what the message says: clearing the first optimizer's gradients after its step = one optimizer per parameter
    cleared_findings, cleared = _combined(clear_first=True)
    assert cleared_findings == []
    _, one_optimizer = _combined(clear_first=False, shared=False)
    for a, b in zip(cleared, one_optimizer):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


ALTERNATING = """\
import torch


def train(enc, h1, h2, data):
    o1 = torch.optim.SGD(list(enc.parameters()) + list(h1.parameters()), lr=0.1)
    o2 = torch.optim.SGD(list(enc.parameters()) + list(h2.parameters()), lr=0.1)
    for x in data:
        h1(enc(x)).pow(2).mean().backward()
        o1.step()
        h2(enc(x)).pow(2).mean().backward()
        o2.step()
        o1.zero_grad()
        o2.zero_grad()
"""


def _lint_messages(source):
    return [(f.code, f.message) for f in gg.lint_source(source)]


def test_the_linter_gives_the_same_advice_for_alternating_losses():
    found = _lint_messages(ALTERNATING)
    assert [c for c, _ in found] == ["GG101"]
    assert "Clear the gradients right after `o1.step()`" in found[0][1] and "two optimizers" not in found[0][1]
    fixed = ALTERNATING.replace("        o1.step()\n", "        o1.step()\n        o1.zero_grad()\n")
    assert codes(fixed) == []
    combined = ALTERNATING.replace("        h1(enc(x)).pow(2).mean().backward()\n", "").replace(
        "        h2(enc(x)).pow(2).mean().backward()\n        o2.step()\n",
        "        o2.step()\n").replace("        o1.step()\n",
                                    "        (h1(enc(x)).pow(2).mean() + h2(enc(x)).pow(2).mean()).backward()\n        o1.step()\n")
    found = _lint_messages(combined)
    assert [c for c, _ in found] == ["GG101"] and "sit in two optimizers" in found[0][1]
    assert "drop one loss" not in found[0][1]
