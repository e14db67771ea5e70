"""dice-embeddings' TorchTrainer with gradient accumulation: `optimizer.step()` runs on every batch while the gradients are cleared only at the end of a window, so each step re-applies the gradients already applied by the earlier steps of its window (and the losses are not divided by the accumulation count).

source: dice-group/dice-embeddings#432 (https://github.com/dice-group/dice-embeddings/issues/432), "TorchTrainer updates weights on every batch during gradient accumulation" (closed): "With accumulation set to 2, weights should remain 0 after the first batch and become 0.2 after the second. Instead, they become 0.2 and 0.56: optimizer.step() runs every batch and reapplies accumulated gradients." with the repro `trainer = TorchTrainer(SimpleNamespace(random_seed=0, gradient_accumulation_steps=2), []) ... trainer.optimizer = torch.optim.SGD([w], lr=0.1); trainer.training_step = lambda batch: (w - 1).square() ...`. dicee/trainer/torch_trainer.py was not read; `_run_batch` is reconstructed from the repro's numbers (0.2 then 0.56 needs an undivided loss, a step every batch and no clear between), and the knowledge-graph embedding model from the repro's scalar to a small embedding scorer. The twin divides the loss by the accumulation count and steps once per window, the issue's expected values (0 then 0.2)
family: misplaced-step
shape: SGD(lr=0.1), gradient_accumulation_steps = 2 over 6 batches of 8 triples
numeric: the bug takes 6 steps, each on the window's running sum (step 2 re-applies batch 1's gradient); the twin takes 3 steps on the window mean
watch: GG101
lint: GG101
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

gradient_accumulation_steps = 2
_gb.setup()
entities, relations = 12, 3
batches = [(torch.randint(0, entities, (8,)), torch.randint(0, relations, (8,)), torch.randint(0, entities, (8,)),
            torch.randint(0, 2, (8,)).double()) for _ in range(6)]
model = torch.nn.ModuleDict({"ent": torch.nn.Embedding(entities, 6), "rel": torch.nn.Embedding(relations, 6)})
_gb.start(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


def training_step(batch):
    h, r, t, label = batch
    score = (model["ent"](h) * model["rel"](r) * model["ent"](t)).sum(1)
    return F.binary_cross_entropy_with_logits(score, label.to(score.dtype))


def run_batch(i, batch):
    loss = training_step(batch)
    # FIX: loss = loss / gradient_accumulation_steps
    loss.backward()
    optimizer.step()  # BUG
    if (i + 1) % gradient_accumulation_steps == 0:
        # FIX: optimizer.step()
        optimizer.zero_grad()


for i, batch in enumerate(batches):
    run_batch(i, batch)
_gb.done(model)
