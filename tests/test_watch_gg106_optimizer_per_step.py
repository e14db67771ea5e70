"""GG106 where each optimizer is built at its own step (one per adapter, as a multi-adapter trainer does).

Two LoRA-like adapters share a frozen base; ``forward_backward(A)``, ``forward_backward(B)``, then
``optim_step(A)`` and ``optim_step(B)``, each building an SGD over its own adapter's parameters. At A's
step, B's parameters hold gradient and no optimizer holds them yet, but B's optimizer, built right
after, takes and applies it: nothing is orphaned. The oracle is plain PyTorch in float64: every
adapter moves by exactly -lr times its own loss's gradient. The negative control is the published bug
(the optimizer takes the parameters that require grad now, the last active adapter's): A's gradient
is never applied, A never moves, and GG106 is reported, naming the first step.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

import gradguard as gg


class TwoAdapters(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.base = torch.nn.Linear(6, 3)
        self.base.requires_grad_(False)
        self.adapters = torch.nn.ModuleDict({k: torch.nn.Sequential(torch.nn.Linear(6, 2, bias=False),
                                                                    torch.nn.Linear(2, 3, bias=False)) for k in "AB"})
        self.active = "A"

    def set_adapter(self, name):
        self.active = name
        for k, a in self.adapters.items():
            a.requires_grad_(k == name)

    def forward(self, x):
        return self.base(x) + self.adapters[self.active](x)


def _run(fixed: bool):
    torch.manual_seed(0)
    model = TwoAdapters().double()
    own = {}
    for k in "AB":
        model.set_adapter(k)
        own[k] = [p for p in model.parameters() if p.requires_grad]
    g = torch.Generator().manual_seed(1)
    data = {k: (torch.randn(8, 6, generator=g, dtype=torch.float64), torch.randint(0, 3, (8,), generator=g)) for k in "AB"}
    expected_moves = {k: [] for k in "AB"}
    moves = {k: [] for k in "AB"}

    def forward_backward(k):
        model.set_adapter(k)
        x, y = data[k]
        # the oracle: this adapter's own gradient, plain autograd, before the pass adds it to .grad
        loss = F.cross_entropy(model(x), y)
        expected_moves[k].append([-0.1 * gr for gr in torch.autograd.grad(loss, own[k], retain_graph=True)])
        loss.backward()

    def optim_step(k):
        if fixed:
            model.set_adapter(k)
            params = own[k]
        else:
            params = [p for p in model.parameters() if p.requires_grad]
        before = {kk: [p.detach().clone() for p in own[kk]] for kk in "AB"}
        opt = torch.optim.SGD(params, lr=0.1)
        opt.step()
        opt.zero_grad()
        moves[k].append([p.detach() - b for p, b in zip(own[k], before[k])])

    with gg.watch(mode="record") as w:
        for _ in range(3):
            forward_backward("A")
            forward_backward("B")
            optim_step("A")
            optim_step("B")
    return w.findings, moves, expected_moves


def test_an_optimizer_built_at_each_adapter_s_step_orphans_nothing():
    findings, moves, expected = _run(fixed=True)
    for k in "AB":
        for got, want in zip(moves[k], expected[k]):
            for a, b in zip(got, want):
                torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    assert [f.code for f in findings] == []


def test_the_active_adapter_s_parameters_taken_by_every_optimizer_is_reported():
    findings, moves, expected = _run(fixed=False)
    assert all(float(d.abs().max()) == 0.0 for step in moves["A"] for d in step)  # A never moves
    assert any(float(e.abs().max()) > 0 for step in expected["A"] for e in step)  # although it has gradient
    gg106 = [f for f in findings if f.code == "GG106"]
    assert gg106 and gg106[0].step == 1
