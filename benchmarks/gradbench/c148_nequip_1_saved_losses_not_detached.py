"""nequip Trainer: the total loss and its per-term contributions are saved for the epoch's statistics as the live tensors the backward pass used, so the saved records keep every batch's computation graph (the interatomic-potential model's forces make those graphs large).

source: mir-group/nequip#1 (https://github.com/mir-group/nequip/pull/1, merged), "Detach all losses that get saved". Only the title was read, not the diff: the trainer follows the description (a loss function returning the total and a dict of contributions, a backward pass and a step per batch, and the loss and contributions saved per batch for the epoch's statistics), the equivariant network is reduced to an MLP energy model whose forces come from autograd (create_graph=True, so the force loss reaches the weights, as in nequip). The twin saves detached copies, as the PR does
family: graph-logging
shape: class Trainer: batch_step(data): out = model(pos); loss, loss_contrib = loss_fn(out, data); optimizer.zero_grad(); loss.backward(); optimizer.step(); self.batch_losses.append({"loss": loss, **loss_contrib}); epoch statistics averaged from self.batch_losses. Adam(lr=1e-3), 2 epochs of 4 batches
numeric: the saved records reach the graphs (energy and double-backward force terms) of every batch
watch: out: saved records hold graph nodes, not gradient; the watch follows .grad
lint: out: the loss is kept by a list append of a dict, not an arithmetic sum (the rule looks for sums)
bug-step: end
"""
import torch
import torch.nn as nn

import _gb


class EnergyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(3, 16), nn.SiLU(), nn.Linear(16, 1))

    def forward(self, pos):
        pos = pos.requires_grad_(True)
        energy = self.net(pos).sum()
        forces = -torch.autograd.grad(energy, pos, create_graph=True)[0]
        return {"total_energy": energy, "forces": forces}


def loss_fn(out, data):
    contrib = {"total_energy": (out["total_energy"] - data["total_energy"]) ** 2,
               "forces": ((out["forces"] - data["forces"]) ** 2).mean()}
    return contrib["total_energy"] + 10 * contrib["forces"], contrib


class Trainer:
    def __init__(self, model, optimizer):
        self.model, self.optimizer = model, optimizer
        self.batch_losses = []

    def batch_step(self, data):
        out = self.model(data["pos"].clone())
        loss, loss_contrib = loss_fn(out, data)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.batch_losses.append({"loss": loss, **loss_contrib})  # BUG
        # FIX: self.batch_losses.append({"loss": loss.detach(), **{k: v.detach() for k, v in loss_contrib.items()}})

    def epoch_step(self, dataset):
        self.batch_losses = []
        for data in dataset:
            self.batch_step(data)
        return {k: sum(b[k] for b in self.batch_losses) / len(self.batch_losses) for k in self.batch_losses[0]}


_gb.setup()
model = EnergyModel()
_gb.start(model)
trainer = Trainer(model, torch.optim.Adam(model.parameters(), lr=1e-3))
dataset = [{"pos": torch.randn(5, 3), "total_energy": torch.randn(()), "forces": torch.randn(5, 3)} for _ in range(4)]
for epoch in range(2):
    stats = trainer.epoch_step(dataset)
_gb.done(model, kept=[b[k] for b in trainer.batch_losses for k in b])
