"""transformers example scripts (2019): clip_grad_norm_ runs after every backward pass, so each accumulation window is clipped partway and again at its end.

source: huggingface/transformers#1563 (https://github.com/huggingface/transformers/issues/1563), "The implementation of grad clipping is not correct when gradient accumulation is enabled": "torch.nn.utils.clip_grad_norm_ should be applied before optimizer.step() not after each backward"; "This should be fixed in https://github.com/huggingface/transformers/pull/1580"; thomwolf: "#1580 is now merged"
family: clip-in-accumulation
shape: examples/run_glue.py, train(): for step, batch in enumerate(epoch_iterator): loss = model(**inputs)[0]; if args.gradient_accumulation_steps > 1: loss = loss / args.gradient_accumulation_steps; loss.backward(); torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm); tr_loss += loss.item(); if (step + 1) % args.gradient_accumulation_steps == 0: optimizer.step(); scheduler.step(); model.zero_grad(); global_step += 1. Fixed (#1580): the clip moved inside the step branch. max_grad_norm = 1.0 (the scripts' default), gradient_accumulation_steps = 4, AdamW
numeric: every window's first micro-batches are clipped before the rest are added, so the step's direction leans to the window's last micro-batches
watch: GG115
lint: GG115
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class Args:
    gradient_accumulation_steps = 4
    max_grad_norm = 1.0
    num_train_epochs = 2


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.classifier = torch.nn.Sequential(torch.nn.Linear(12, 64), torch.nn.ReLU(), torch.nn.Linear(64, 3))

    def forward(self, input_ids, labels):
        logits = self.classifier(input_ids)
        return (F.cross_entropy(logits, labels), logits)


def train(args, train_dataloader, model):
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3, eps=1e-8)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    global_step, tr_loss = 0, 0.0
    model.zero_grad()
    for _ in range(args.num_train_epochs):
        for step, batch in enumerate(train_dataloader):
            model.train()
            inputs = {"input_ids": batch[0], "labels": batch[1]}
            outputs = model(**inputs)
            loss = outputs[0]
            if args.gradient_accumulation_steps > 1:
                loss = loss / args.gradient_accumulation_steps
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)  # BUG
            tr_loss += loss.item()
            if (step + 1) % args.gradient_accumulation_steps == 0:
                # FIX: torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
                optimizer.step()
                scheduler.step()
                model.zero_grad()
                global_step += 1
    return global_step, tr_loss / global_step


_gb.setup()
model = Model()
_gb.start(model)
train_dataloader = [(20 * x, (x[:, 0] > 0).long() + (x[:, 1] > 0).long()) for x in (torch.randn(8, 12) for _ in range(8))]
train(Args(), train_dataloader, model)
_gb.done(model)
