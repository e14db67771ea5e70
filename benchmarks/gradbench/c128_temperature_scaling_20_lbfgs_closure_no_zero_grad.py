"""temperature_scaling: the LBFGS closure `eval()` calls `loss.backward()` without clearing the temperature's gradient, so every evaluation LBFGS makes inside its step sees the sum of all earlier gradients and the line search works on a wrong gradient.

source: gpleiss/temperature_scaling#20 (https://github.com/gpleiss/temperature_scaling/issues/20), "my simple correction for reproducing good performance": "(2) adding optimizer.zero_grad(): def eval(): loss = nll_criterion(self.temperature_scale(logits), labels); optimizer.zero_grad()" — with it the optimal temperature goes from 1386304.250 (with model.eval() added, 5.823) to 1.800 and the NLL after scaling from 1.572 to 1.460. The issue is open; the repository's temperature_scaling.py as read now clears inside the closure (def eval(): optimizer.zero_grad(); loss = nll_criterion(...); loss.backward(); return loss), the fix the issue describes. The CUDA calls are dropped and the network's validation logits are a fixed random classifier's
family: missing-clear
shape: optimizer = optim.LBFGS([self.temperature], lr=0.01, max_iter=50); def eval(): loss = nll_criterion(self.temperature_scale(logits), labels); loss.backward(); return loss; optimizer.step(eval). logits and labels collected under no_grad first
numeric: each closure evaluation inside the one LBFGS step returns the running sum of all earlier gradients, so the fitted temperature differs
watch: GG101
lint: GG101
bug-step: 1
"""
import torch
from torch import nn, optim

import _gb


class ModelWithTemperature(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model
        self.temperature = nn.Parameter(torch.ones(1) * 1.5)

    def temperature_scale(self, logits):
        temperature = self.temperature.unsqueeze(1).expand(logits.size(0), logits.size(1))
        return logits / temperature

    def set_temperature(self, valid_loader):
        nll_criterion = nn.CrossEntropyLoss()
        logits_list, labels_list = [], []
        with torch.no_grad():
            for input, label in valid_loader:
                logits_list.append(self.model(input))
                labels_list.append(label)
            logits = torch.cat(logits_list)
            labels = torch.cat(labels_list)
        optimizer = optim.LBFGS([self.temperature], lr=0.01, max_iter=50)

        def eval():
            # FIX: optimizer.zero_grad()
            loss = nll_criterion(self.temperature_scale(logits), labels)
            loss.backward()
            return loss
        optimizer.step(eval)
        return self


_gb.setup()
net = nn.Linear(8, 5)
scaled = ModelWithTemperature(net)
_gb.start(scaled.temperature)
inputs = torch.randn(64, 8)
valid_loader = [(x, y) for x, y in zip((3 * inputs).split(16), (inputs[:, :5].argmax(1)).split(16))]
scaled.set_temperature(valid_loader)
_gb.done(scaled.temperature)
