"""GG104: a micro-step loop that clears the gradient on a pass after its first is no undivided window.

PGD adversarial training (``for t in range(K): attack; if t != K - 1: zero_grad() else: restore_grad();
loss_adv.backward()``, then one step) clears on every pass but the last, where it puts the clean
gradient back: the step applies the clean gradient plus the last attack's, by design, never K
passes of a mean. Each program is run in float64: the truth is which passes the gradient the step
applies is the sum of. Negative controls: a clear pinned to the first pass (``if t == 0:``) and no
clear at all leave all K undivided passes in the window, and stay reported.
"""

from __future__ import annotations

import re
import textwrap

import pytest
import torch

from _findings import codes

PGD = """\
import torch


class Attack:
    def __init__(self, model):
        self.model, self.saved, self.weight = model, {}, None

    def backup_grad(self):
        self.saved = {n: p.grad.clone() for n, p in self.model.named_parameters()}

    def restore_grad(self):
        for n, p in self.model.named_parameters():
            p.grad = self.saved[n].clone()

    def attack(self, t):
        if self.weight is None:
            self.weight = self.model.weight.data.clone()
        self.model.weight.data.add_(0.01 * (t + 1))

    def restore(self):
        self.model.weight.data.copy_(self.weight)
        self.weight = None


def train(model, data, optimizer, K, seen):
    adv = Attack(model)
    for x, y in data:
        model.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        adv.backup_grad()
        for t in range(K):
            adv.attack(t)
            if t != K - 1:
                model.zero_grad()
            else:
                adv.restore_grad()
            loss_adv = ((model(x) - y) ** 2).mean()
            loss_adv.backward()
        adv.restore()
        seen([p.grad.clone() for p in model.parameters()])
        optimizer.step()
"""
# the clear pinned to the first pass: the loop's K passes all reach the step, undivided
FIRST_PASS_BAD = PGD.replace("            if t != K - 1:\n                model.zero_grad()\n            else:\n"
                             "                adv.restore_grad()\n", "            if t == 0:\n                model.zero_grad()\n")
NO_CLEAR_BAD = PGD.replace("            if t != K - 1:\n                model.zero_grad()\n            else:\n"
                           "                adv.restore_grad()\n", "")


def _gg104(source):
    return [c for c in codes(source) if c == "GG104"]


def _applied_and_passes(source, K=3):
    """Run one step in float64: the gradient the step applies, the clean pass's gradient and each
    attack pass's gradient, computed independently at the same perturbed weights."""
    namespace = {}
    exec(compile(textwrap.dedent(source), "<train>", "exec"), namespace)
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1).double()
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(4, 3, generator=g, dtype=torch.float64), torch.randn(4, 1, generator=g, dtype=torch.float64)
    ref = torch.nn.Linear(3, 1).double()
    ref.load_state_dict(model.state_dict())

    def grad_at(shift):
        ref.zero_grad()
        with torch.no_grad():
            w = ref.weight.clone()
            ref.weight.add_(shift)
        ((ref(x) - y) ** 2).mean().backward()
        with torch.no_grad():
            ref.weight.copy_(w)
        return torch.cat([p.grad.flatten() for p in ref.parameters()])

    clean = grad_at(0.0)
    passes, shift = [], 0.0
    for t in range(K):
        shift += 0.01 * (t + 1)
        passes.append(grad_at(shift))
    held = []
    namespace["train"](model, [(x, y)], torch.optim.SGD(model.parameters(), lr=0.1), K, held.append)
    return torch.cat([g.flatten() for g in held[0]]), clean, passes


def test_pgd_loop_applies_the_clean_plus_the_last_attack_gradient_and_is_not_reported():
    applied, clean, passes = _applied_and_passes(PGD)
    assert torch.allclose(applied, clean + passes[-1])
    assert not torch.allclose(applied, clean + sum(passes))
    assert _gg104(PGD) == []


@pytest.mark.parametrize("source", [FIRST_PASS_BAD, NO_CLEAR_BAD], ids=["cleared-before-the-first-pass", "never-cleared"])
def test_negative_control_all_k_passes_reach_the_step_and_are_reported(source):
    assert source != PGD
    applied, clean, passes = _applied_and_passes(source)
    window = sum(passes) if "t == 0" in source else clean + sum(passes)
    assert torch.allclose(applied, window)
    assert _gg104(source) == ["GG104"]


def _rewrite(source: str) -> str:
    """Rename the user's names, the helper class and its methods."""
    for old, new in (("adv", "perturber"), ("loss_adv", "attacked_loss"), ("model", "net"), ("K", "n_steps"),
                     ("Attack", "Perturbation"), ("restore_grad", "put_back"), ("backup_grad", "keep"), ("t", "it")):
        source = re.sub(rf"\b{old}\b", new, source)
    return source


def test_renamed_programs_keep_their_verdicts():
    good, first, never = _rewrite(PGD), _rewrite(FIRST_PASS_BAD), _rewrite(NO_CLEAR_BAD)
    assert good != PGD
    assert torch.allclose(*(lambda a, c, p: (a, c + p[-1]))(*_applied_and_passes(good)))
    assert _gg104(good) == []
    assert _gg104(first) == ["GG104"] and _gg104(never) == ["GG104"]
