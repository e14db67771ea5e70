"""torchforge trainer that never zeroed gradients after each step.

source: meta-pytorch/torchforge#71 (https://github.com/meta-pytorch/torchforge/pull/71), "[ez] zero grad every step": "we weren't zeroing grad on optimizers after each step"
family: missing-clear
shape: a trainer object whose train_step() runs forward, backward and optimizer.step(), meant to clear after the step
numeric: step t applies the sum of the gradients of steps 1..t
watch: GG101
lint: GG101
bug-step: 2
"""
import torch
import torch.nn.functional as F

import _gb


class Trainer:
    def __init__(self, model, lr):
        self.model = model
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)

    def train_step(self, batch):
        logits = self.model(batch["input"])
        loss = F.cross_entropy(logits, batch["target"])
        loss.backward()
        self.optimizer.step()
        # FIX: self.optimizer.zero_grad()
        return loss.item()


_gb.setup()
trainer = Trainer(torch.nn.Sequential(torch.nn.Embedding(20, 8), torch.nn.Flatten(), torch.nn.Linear(24, 20)), lr=1e-2)
_gb.start(trainer.model)
for step in range(6):
    trainer.train_step({"input": torch.randint(0, 20, (4, 3)), "target": torch.randint(0, 20, (4,))})
_gb.done(trainer.model)
