"""poutyne Model training step: the step clears gradients with `self.model.zero_grad()` (the network) rather than `self.optimizer.zero_grad()`, so parameters the optimizer holds outside the network, here a learnable loss's weights, are never cleared and every step applies the sum of all their past gradients.

source: freud14/poutyne#12 (https://github.com/freud14/poutyne/issues/12), "self.optimizer.zero_grad() or self.model.zero_grad() ?": "In the line 311 of file model.py, should It be self.optimizer.zero_grad() instead of: self.model.zero_grad()". The maintainer (freud14): "I was actually wondering the same thing a while ago. I made a commit in the dev branch." model.py was not read: the step follows the issue (self.model.zero_grad(); loss = self.loss_function(self.model(x), y); loss.backward(); self.optimizer.step()); the learnable loss is an uncertainty-weighted two-task loss (log-variance weights, a module of its own) whose parameters are in the optimizer with the network's, as poutyne allows. The twin clears with self.optimizer.zero_grad(), the issue's change
family: missing-clear
shape: SGD(lr=0.01, momentum=0.9) on network + loss parameters (poutyne takes any optimizer); 6 steps on batches of 16
numeric: from step 2 the loss weights' gradient is the sum of all steps so far
watch: GG101
lint: GG101
bug-step: 2
"""
import torch
import torch.nn.functional as F

import _gb


class UncertaintyLoss(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.log_vars = torch.nn.Parameter(torch.zeros(2))

    def forward(self, pred, y):
        losses = torch.stack([F.mse_loss(pred[:, 0], y[:, 0]), F.mse_loss(pred[:, 1], y[:, 1])])
        return (torch.exp(-self.log_vars) * losses + self.log_vars).sum()


class Model:
    def __init__(self, network, optimizer, loss_function):
        self.model, self.optimizer, self.loss_function = network, optimizer, loss_function

    def train_on_batch(self, x, y):
        self.model.zero_grad()  # BUG
        # FIX: self.optimizer.zero_grad()
        loss = self.loss_function(self.model(x), y)
        loss.backward()
        self.optimizer.step()
        return float(loss)


_gb.setup()
network = torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
loss_function = UncertaintyLoss()
_gb.start(network, loss_function)
optimizer = torch.optim.SGD(list(network.parameters()) + list(loss_function.parameters()), lr=0.01, momentum=0.9)
model = Model(network, optimizer, loss_function)
for step in range(6):
    x = torch.randn(16, 10)
    model.train_on_batch(x, torch.stack([x[:, 0], 3 * x[:, 1]], 1))
_gb.done(network, loss_function)
