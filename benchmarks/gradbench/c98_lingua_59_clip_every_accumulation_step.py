"""Meta Lingua apps/main/train.py: the gradient norm is clipped on every accumulation step, not once before the optimizer step.

source: facebookresearch/lingua#59 (https://github.com/facebookresearch/lingua/pull/59), "fix gradient clipping w/ gradient accumulation" (merged): "Clipping gradients at each accumulation step is different from clipping just once, right before the optimizer step. (and the latter is consistent with training using the same batch sizes without accumulation.)". Code read (after the fix): apps/main/train.py divides the loss by grad_acc_steps, backward, and runs clip_grad_norm_(model.parameters(), max_norm=args.optim.clip, foreach=True), optimizer.step(), scheduler.step(), optimizer.zero_grad() inside `if train_state.acc_step == 0:`; before the fix the clip ran above that test
family: clip-in-accumulation
shape: while train_state.step < args.steps: train_state.acc_step += 1; train_state.acc_step = train_state.acc_step % args.grad_acc_steps; loss = model(input_ids, labels); loss = loss / args.grad_acc_steps; loss.backward(); loss = loss.detach() * args.grad_acc_steps; grad_norm = clip_grad_norm_(model.parameters(), max_norm=args.optim.clip, foreach=True); if train_state.acc_step == 0: optimizer.step(); scheduler.step(); optimizer.zero_grad(); train_state.step += 1. optim.clip = 1.0, grad_acc_steps = 4, AdamW
numeric: each window's running sum is clipped after every micro-batch, so the update is not the clipped full-batch gradient
watch: GG115
lint: GG115
bug-step: 1
"""
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

import _gb


@dataclass
class OptimArgs:
    lr: float = 3e-3
    clip: float = 1.0


@dataclass
class TrainArgs:
    steps: int = 5
    grad_acc_steps: int = 4
    optim: OptimArgs = field(default_factory=OptimArgs)


@dataclass
class TrainState:
    step: int = 0
    acc_step: int = 0


class LMTransformer(torch.nn.Module):
    def __init__(self, vocab=64, dim=1024):
        super().__init__()
        self.tok_embeddings = torch.nn.Embedding(vocab, dim)
        self.output = torch.nn.Linear(dim, vocab)

    def forward(self, input_ids, labels):
        logits = self.output(torch.tanh(self.tok_embeddings(input_ids)))
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten())


def train(args, model, data):
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.optim.lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    train_state = TrainState()
    batches = iter(data)
    while train_state.step < args.steps:
        train_state.acc_step += 1
        train_state.acc_step = train_state.acc_step % args.grad_acc_steps
        input_ids, labels = next(batches)
        loss = model(input_ids, labels)
        # We scale loss with grad_acc_steps so the gradient is the same regardless of grad_acc_steps
        loss = loss / args.grad_acc_steps
        loss.backward()
        loss = loss.detach() * args.grad_acc_steps
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=args.optim.clip, foreach=True)  # BUG
        grad_norm = -1.0
        if train_state.acc_step == 0:
            # FIX: grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=args.optim.clip, foreach=True)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            train_state.step += 1


_gb.setup()
model = LMTransformer()
_gb.start(model)
tokens = torch.randint(0, 64, (20, 4, 9))
data = [(t[:, :-1], t[:, 1:]) for t in tokens]
train(TrainArgs(), model, data)
_gb.done(model)
