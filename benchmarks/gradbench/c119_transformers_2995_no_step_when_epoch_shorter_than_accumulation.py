"""transformers examples/run_glue.py: the optimizer steps only when `(step + 1) % gradient_accumulation_steps == 0`, so an epoch with fewer batches than gradient_accumulation_steps never steps; the gradients of every batch are computed and never applied.

source: huggingface/transformers#2995 (https://github.com/huggingface/transformers/issues/2995), "No optimizer steps when gradient_accumulation_steps smaller than epoch_iterator length" (the official example script, run_glue.py#L233): "step is at most len(train_dataloader)/batch_size. If the latter is small, then we would never enter the if condition and never call optimizer.step()"; proposed condition: if (step + 1) % args.gradient_accumulation_steps == 0 or ((step + 1) < args.gradient_accumulation_steps and (step + 1) == len(epoch_iterator)). LysandreJik (maintainer): "Sure, we would welcome a PR!" BERT is reduced to a small classifier. The twin uses the proposed condition and, since that short window has fewer micro-batches than the divisor, divides each loss by the window's real size (the proposal alone would step on 3/4 of the mean)
family: dropped-window
shape: model.zero_grad(); for _ in train_iterator: epoch_iterator = train_dataloader; for step, batch in enumerate(epoch_iterator): model.train(); outputs = model(**inputs); loss = outputs[0]; if args.gradient_accumulation_steps > 1: loss = loss / args.gradient_accumulation_steps; loss.backward(); tr_loss += loss.item(); if (step + 1) % args.gradient_accumulation_steps == 0: clip_grad_norm_(model.parameters(), args.max_grad_norm); optimizer.step(); scheduler.step(); model.zero_grad(); global_step += 1. 3 batches per epoch, gradient_accumulation_steps = 4, 3 epochs, AdamW, linear schedule
numeric: the model never changes (no step in 3 epochs); the twin steps once per epoch on the epoch's mean gradient
watch: GG103
lint: GG103
bug-step: end
"""
import argparse

import torch
import torch.nn.functional as F

import _gb


class Classifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh())
        self.classifier = torch.nn.Linear(16, 2)

    def forward(self, input_ids, labels):
        logits = self.classifier(self.encoder(input_ids))
        return (F.cross_entropy(logits, labels), logits)


_gb.setup()
model = Classifier()
_gb.start(model)
args = argparse.Namespace(gradient_accumulation_steps=4, max_grad_norm=1.0, num_train_epochs=3, learning_rate=5e-3)
train_dataloader = [(x, (x[:, 0] > 0).long()) for x in (torch.randn(8, 8) for _ in range(3))]
t_total = max(1, len(train_dataloader) // args.gradient_accumulation_steps) * args.num_train_epochs
optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: max(0.0, (t_total - s) / t_total))
global_step, tr_loss = 0, 0.0
model.zero_grad()
for _ in range(args.num_train_epochs):
    epoch_iterator = train_dataloader
    for step, batch in enumerate(epoch_iterator):
        model.train()
        inputs = {"input_ids": batch[0], "labels": batch[1]}
        outputs = model(**inputs)
        loss = outputs[0]
        if args.gradient_accumulation_steps > 1:
            loss = loss / args.gradient_accumulation_steps  # BUG
            # FIX: loss = loss / min(args.gradient_accumulation_steps, len(epoch_iterator))
        loss.backward()
        tr_loss += loss.item()
        if (step + 1) % args.gradient_accumulation_steps == 0:  # BUG
        # FIX: if (step + 1) % args.gradient_accumulation_steps == 0 or ((step + 1) < args.gradient_accumulation_steps and (step + 1) == len(epoch_iterator)):
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
            optimizer.step()
            scheduler.step()
            model.zero_grad()
            global_step += 1
_gb.done(model)
