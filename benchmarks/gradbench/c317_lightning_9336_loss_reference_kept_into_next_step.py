"""PyTorch Lightning's training batch loop kept a reference to the step's training loss (in the batch loop's outputs) after the optimizer step, so the loss's autograd graph could not be garbage collected until the next training step replaced it: each step ran while the previous step's graph was still alive, and the last one stays alive after training.

source: Lightning-AI/pytorch-lightning#9336 (https://github.com/Lightning-AI/pytorch-lightning/pull/9336), "Clear reference to training loss at the end of train step" (bug / fix, logging, P0, merged), with the added test `test_batch_loop_releases_loss`: "Test that loss/graph is released and that it can be garbage collected before the next training step". The batch loop is written out as a small class that runs the closure (training step, backward), steps, and keeps the step's output dict; the model is an MLP classifier. The twin keeps the loss detached, which is what clearing the reference amounts to for the graph
family: graph-logging
shape: SGD(lr=0.05), 6 steps on batches of 32
numeric: the last step's loss keeps its graph after training (during training, each step's graph lives into the next step)
watch: out: the loop's output holds graph nodes, not gradient; the watch follows .grad
lint: out: the loss is kept by an attribute assignment inside the loop's class, not an arithmetic sum in the loop
bug-step: end
"""
import torch
import torch.nn.functional as F

import _gb


class TrainingBatchLoop:
    def __init__(self, model, optimizer):
        self.model, self.optimizer, self._outputs = model, optimizer, None

    def run(self, batch):
        x, y = batch
        self.optimizer.zero_grad()
        loss = F.cross_entropy(self.model(x), y)
        loss.backward()
        self.optimizer.step()
        self._outputs = {"loss": loss}  # BUG
        # FIX: self._outputs = {"loss": loss.detach()}
        return self._outputs


_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
_gb.start(model)
batch_loop = TrainingBatchLoop(model, torch.optim.SGD(model.parameters(), lr=0.05))
for batch_idx in range(6):
    batch_loop.run((torch.randn(32, 16), torch.randint(0, 4, (32,))))
_gb.done(model, kept=[batch_loop._outputs["loss"]])
