"""ALF: optimizer.zero_grad() called before every optimizer-step call, even on the micro-steps that only accumulate.

source: HorizonRobotics/alf#1788 (https://github.com/HorizonRobotics/alf/pull/1788), "fix grad accumulation": "Bug introduced by PR #1780 where in ALF we always call optimizer.zero_grad() before each optimizer step. However, this step should be ignored before the grad is actually applied if we have grad acc steps > 1"
family: misplaced-clear
shape: Algorithm.update_with_gradient(loss_info): for optimizer in self.optimizers(): optimizer.zero_grad(); loss.backward(); then the wrapped optimizer's step() applies only every grad_acc_steps calls
numeric: each applied step holds the last micro-step's gradient only
watch: GG102
lint: GG102
bug-step: 1
"""
import torch

import _gb


class AccumulatingOptimizer:
    """Steps the wrapped optimizer every ``grad_acc_steps`` calls (ALF's gradient accumulation)."""

    def __init__(self, opt, grad_acc_steps):
        self.opt, self.grad_acc_steps, self.calls = opt, grad_acc_steps, 0

    def zero_grad(self):
        self.opt.zero_grad()  # BUG
        # FIX: self.opt.zero_grad() if self.calls % self.grad_acc_steps == 0 else None

    def step(self):
        self.calls += 1
        if self.calls % self.grad_acc_steps == 0:
            self.opt.step()


class Algorithm:
    def __init__(self):
        self.model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
        self.optimizer = AccumulatingOptimizer(torch.optim.SGD(self.model.parameters(), lr=0.1), grad_acc_steps=2)

    def update_with_gradient(self, x, y):
        self.optimizer.zero_grad()
        loss = ((self.model(x) - y) ** 2).mean() / 2
        loss.backward()
        self.optimizer.step()


_gb.setup()
algo = Algorithm()
_gb.start(algo.model)
for _ in range(6):
    algo.update_with_gradient(torch.randn(6, 4), torch.randn(6, 1))
_gb.done(algo.model)
