"""ULTRA_pytorch's DLA (dual learning algorithm): `train()` returns `self.loss`, the loss tensor, and the training loop averages the returned losses over a checkpoint interval with `loss += step_loss / steps_per_checkpoint`, so the running average joins every step's computation graph and keeps all of them alive until it is reset (CPU memory is used up after about 10k steps).

source: ULTR-Community/ULTRA_pytorch#6 (https://github.com/ULTR-Community/ULTRA_pytorch/issues/6), "Memory Leakage in DLA implementation": "When I run DLA for 10k steps, the CPU memory will be used up. A simple fixation is to modify it as `self.loss.item()`. A similar issue also occurs in regression_EM, pdgd, nsgd, etc." (closed). dla.py was read (train() ends with `return self.loss, None, self.train_summary`); the main loop was not, its sum follows the upstream ULTRA main.py; the ranking and propensity models are reduced to two small MLPs with DLA's two softmax losses, one optimizer over both. The twin returns self.loss.item(), the issue's fix
family: graph-logging
shape: Adam(lr=1e-3); 8 steps on lists of 6 documents, a checkpoint every 8 steps
numeric: the 8 steps' graphs stay reachable from the running loss until the checkpoint
watch: out: a logging sum holds graph nodes, not gradient; the watch follows .grad
lint: GG201
bug-step: end
"""
import torch
import torch.nn.functional as F

import _gb


class DLA:
    def __init__(self):
        self.ranking_model = torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.ELU(), torch.nn.Linear(16, 1))
        self.propensity_model = torch.nn.Linear(6, 6)
        params = list(self.ranking_model.parameters()) + list(self.propensity_model.parameters())
        self.optimizer = torch.optim.Adam(params, lr=1e-3)

    def train(self, features, clicks):
        scores = self.ranking_model(features).squeeze(-1)
        propensity = self.propensity_model(torch.ones_like(clicks))
        pw = (F.softmax(propensity, -1)[:, :1] / F.softmax(propensity, -1)).detach()
        rw = (F.softmax(scores, -1) / F.softmax(scores, -1)[:, :1]).detach()
        rank_loss = -(pw * clicks * F.log_softmax(scores, -1)).sum(-1).mean()
        exam_loss = -(rw * clicks * F.log_softmax(propensity, -1)).sum(-1).mean()
        self.loss = exam_loss + rank_loss
        self.optimizer.zero_grad()
        self.loss.backward()
        self.optimizer.step()
        return self.loss, None, {}  # BUG
        # FIX: return self.loss.item(), None, {}


_gb.setup()
batches = [(torch.randn(4, 6, 5), (torch.rand(4, 6) < 0.3).to(torch.get_default_dtype())) for _ in range(8)]
model = DLA()
_gb.start(model.ranking_model, model.propensity_model)
steps_per_checkpoint = 8
loss = 0.0
for step, (features, clicks) in enumerate(batches):
    step_loss, _, summary = model.train(features, clicks)
    loss += step_loss / steps_per_checkpoint
_gb.done(model.ranking_model, model.propensity_model, kept=loss)
