"""HF Trainer (3.1): training_step returns the loss undetached and train() sums it into tr_loss, keeping every step's graph.

source: huggingface/transformers#6999 (https://github.com/huggingface/transformers/pull/6999), "fixed trainer tr_loss memory leak" (merged, fixes #6939): "The Trainer class contains the memory leak ... It is not specific to any particular model type"; review: "the problem is ... that we don't call `.detach()`, which means some variables are kept forever"
family: graph-logging
shape: Trainer.training_step(model, inputs): outputs = model(**inputs); loss = outputs[0]; loss.backward(); return loss (the fix: return loss.detach()); Trainer.train: tr_loss = torch.tensor(0.0); for step, inputs in enumerate(epoch_iterator): tr_loss += self.training_step(model, inputs); optimizer.step(); model.zero_grad()
numeric: tr_loss reaches one autograd node chain per training step until training ends ("around 20 000 steps ... before using up all 12GB of RAM")
watch: out: a logging sum holds graph nodes, not gradient; the watch follows .grad
lint: GG201
bug-step: end
"""
import torch
import torch.nn.functional as F

import _gb


class Trainer:
    def __init__(self, model, optimizer):
        self.model, self.optimizer = model, optimizer

    def training_step(self, model, inputs):
        model.train()
        logits = model(inputs["input"])
        loss = F.cross_entropy(logits, inputs["labels"])
        loss.backward()
        return loss  # BUG
        # FIX: return loss.detach()

    def train(self, batches):
        tr_loss = torch.tensor(0.0)
        for step, inputs in enumerate(batches):
            tr_loss += self.training_step(self.model, inputs)
            self.optimizer.step()
            self.model.zero_grad()
        return tr_loss


_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
_gb.start(model)
trainer = Trainer(model, torch.optim.AdamW(model.parameters(), lr=1e-3))
batches = [{"input": x, "labels": (x[:, :4].argmax(dim=1))} for x in (torch.randn(6, 8) for _ in range(8))]
tr_loss = trainer.train(batches)
_gb.done(model, kept=tr_loss)
