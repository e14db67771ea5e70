"""APPFL client trainer: `_train_batch` clips the gradients with `clip_grad_norm_` after `optimizer.step()`, so the federated client's local updates are never clipped (and with differential privacy the clip that bounds each update's sensitivity does nothing).

source: APPFL/APPFL#198 (https://github.com/APPFL/APPFL/pull/198, merged), "fix issue #197": "Fix issue #197 by moving gradient clipping before optimzer.step()". The pre-fix code was not read: the batch step follows the order the PR fixes, in the shape of APPFL's VanillaTrainer (optimizer.zero_grad(); output = self.model(data); loss = self.loss_fn(output, target); loss.backward(); optimizer.step(); if self.train_configs.clip_grad: torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.train_configs.clip_value, norm_type=self.train_configs.clip_norm)); the client's model is an MLP on tabular data with inputs scaled so the gradient norm exceeds clip_value. The twin clips before the step, as the fix does
family: clip-misplaced
shape: a client trainer class with _train_batch(optimizer, data, target) as quoted; clip_value = 1.0, clip_norm = 2, SGD(lr=0.05), 2 local epochs of 4 batches
numeric: every local update whose gradient norm exceeds 1.0 uses the unclipped gradient
watch: GG116
lint: GG116
bug-step: 1
"""
import torch

import _gb


class TrainConfigs:
    clip_grad = True
    clip_value = 1.0
    clip_norm = 2
    num_local_epochs = 2


class VanillaTrainer:
    def __init__(self, model, loss_fn, train_dataloader, train_configs):
        self.model, self.loss_fn = model, loss_fn
        self.train_dataloader, self.train_configs = train_dataloader, train_configs

    def _train_batch(self, optimizer, data, target):
        optimizer.zero_grad()
        output = self.model(data)
        loss = self.loss_fn(output, target)
        loss.backward()
        # FIX: if self.train_configs.clip_grad:
        # FIX:     torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.train_configs.clip_value, norm_type=self.train_configs.clip_norm)
        optimizer.step()
        if self.train_configs.clip_grad:  # BUG
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.train_configs.clip_value, norm_type=self.train_configs.clip_norm)  # BUG
        return loss.item()

    def train(self):
        self.model.train()
        optimizer = torch.optim.SGD(self.model.parameters(), lr=0.05)
        for epoch in range(self.train_configs.num_local_epochs):
            for data, target in self.train_dataloader:
                self._train_batch(optimizer, data, target)


_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(7, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
_gb.start(model)
loader = [(10 * torch.randn(8, 7), torch.randint(0, 2, (8,))) for _ in range(4)]
VanillaTrainer(model, torch.nn.CrossEntropyLoss(), loader, TrainConfigs()).train()
_gb.done(model)
