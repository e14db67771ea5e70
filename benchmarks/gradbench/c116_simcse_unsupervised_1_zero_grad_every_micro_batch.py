"""SimCSE_unsupervised training loop: `optimizer.zero_grad()` at the top of every iteration clears the accumulated gradients, so each step (every gradient_accumulation_steps iterations) applies only the last micro-batch, divided by the accumulation count.

source: bhuvanakundumani/SimCSE_unsupervised#1 (https://github.com/bhuvanakundumani/SimCSE_unsupervised/issues/1), "why zero_grad twice?", quoting the loop: for step, batch in enumerate(tqdm(train_dataloader, desc="Iteration")): ... optimizer.zero_grad(); outputs = model(input_ids,attention_mask,token_type_ids); loss = outputs["loss"]; if args.gradient_accumulation_steps > 1: loss = loss / args.gradient_accumulation_steps; loss.backward(); running_loss += loss.item(); if (step + 1) % args.gradient_accumulation_steps == 0: optimizer.step(); scheduler.step(); model.zero_grad() — "wouldn't calling optimizer.zero_grad() clear the previous gradients that might not have been used for the update yet?". Open, no reply (unconfirmed). The BERT encoder is reduced to a small MLP with dropout and the unsupervised SimCSE loss (two dropout views, cross-entropy over cosine similarities / 0.05); the twin drops the per-iteration clear (the model.zero_grad() after the step stays)
family: misplaced-clear
shape: as quoted; gradient_accumulation_steps = 4, 16 batches, AdamW with a linear warm-up/decay LambdaLR scheduler
numeric: every step applies a quarter of one micro-batch's gradient instead of the window's mean
watch: GG102
lint: GG102
bug-step: 1
"""
import argparse

import torch
import torch.nn.functional as F

import _gb


class SimCSE(torch.nn.Module):
    def __init__(self, temp=0.05):
        super().__init__()
        self.encoder = torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.Tanh(), torch.nn.Dropout(0.1), torch.nn.Linear(32, 16))
        self.temp = temp

    def forward(self, input_ids, attention_mask, token_type_ids):
        x = input_ids * attention_mask + 0.0 * token_type_ids
        z1, z2 = self.encoder(x), self.encoder(x)  # two dropout views of the same batch
        sim = F.cosine_similarity(z1.unsqueeze(1), z2.unsqueeze(0), dim=-1) / self.temp
        return {"loss": F.cross_entropy(sim, torch.arange(x.size(0)))}


_gb.setup()
model = SimCSE()
_gb.start(model)
args = argparse.Namespace(gradient_accumulation_steps=4)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
total = 16 // args.gradient_accumulation_steps
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 2) * max(0.0, (total - s) / total))
train_dataloader = [(torch.randn(6, 10), torch.ones(6, 10), torch.zeros(6, 10)) for _ in range(16)]
running_loss = 0.0
model.train()
for step, batch in enumerate(train_dataloader):
    input_ids, attention_mask, token_type_ids = batch
    optimizer.zero_grad()  # BUG
    outputs = model(input_ids, attention_mask, token_type_ids)
    loss = outputs["loss"]
    if args.gradient_accumulation_steps > 1:
        loss = loss / args.gradient_accumulation_steps
    loss.backward()
    running_loss += loss.item()
    if (step + 1) % args.gradient_accumulation_steps == 0:
        optimizer.step()
        scheduler.step()
        model.zero_grad()
_gb.done(model)
