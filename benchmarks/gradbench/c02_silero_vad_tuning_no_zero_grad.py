"""silero-vad tuning loop without optimizer.zero_grad().

source: snakers4/silero-vad#699 (https://github.com/snakers4/silero-vad/pull/699), "fix bug in tuning/utils.py: add optimizer.zero_grad() before loss.backward()"
family: missing-clear
shape: a train() helper in the tuning utilities computes a masked BCE over frame probabilities, backward, step, and never clears
numeric: every step after the first applies the running sum of all earlier gradients
watch: GG101
lint: GG101
bug-step: 2
"""
import torch

import _gb


def train(model, loader, optimizer, criterion):
    model.train()
    for x, targets, masks in loader:
        # FIX: optimizer.zero_grad()
        probs = torch.sigmoid(model(x)).squeeze(-1)
        loss = (criterion(probs, targets) * masks).sum() / masks.sum()
        loss.backward()
        optimizer.step()


_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(8, 6), torch.nn.Tanh(), torch.nn.Linear(6, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
_gb.start(model)
loader = [(torch.randn(4, 10, 8), torch.randint(0, 2, (4, 10)).to(torch.get_default_dtype()),
           (torch.rand(4, 10) > 0.2).to(torch.get_default_dtype())) for _ in range(6)]
train(model, loader, optimizer, torch.nn.BCELoss(reduction="none"))
_gb.done(model)
