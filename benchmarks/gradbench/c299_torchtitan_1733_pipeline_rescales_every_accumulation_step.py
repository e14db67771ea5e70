"""torchtitan with pipeline parallelism and gradient accumulation: the pipeline schedule, built with `scale_grads=True` (its default), divides all gradients by the number of micro-batches at the end of every `step()`, including the accumulation steps, so the gradient accumulated over a window becomes an exponential moving average (the first step's share divided again at every later step) instead of the sum, much smaller than without pipeline parallelism.

source: pytorch/torchtitan#1733 (https://github.com/pytorch/torchtitan/issues/1733), "Gradient accumulation broken in PP" (high priority, closed): "When this option is set, at each step, all gradients are scaled by the micro-batch size. This works fine for a single gradient accumulation step, but when using multiple steps, this will rescale the total gradient by this factor, not just at the end of gradient accumulation. The result is that the accumulated gradient is an exponential moving average, rather than a sum"; fixed by PR #1732, which sets scale_grads=False and divides the loss by n_microbatches along with gradient_accumulation_steps in rescale_accumulated_loss. The schedule's step is written out as a function over one stage (forward and backward of each micro-batch, then the division of every gradient when scale_grads is on); the model is an MLP language-model head on random tokens. The twin divides the loss instead, as the fix does
family: overscaled
shape: SGD(lr=0.1); gradient_accumulation_steps = 2 schedule steps of n_microbatches = 4 per optimizer step, 4 optimizer steps
numeric: the window's last schedule step keeps its share of the mean and the first gets a quarter of it (divided by n_microbatches once more); the twin gives both their share
watch: GG113
lint: out: the division runs inside the pipeline schedule's step over the stage's gradients, not on a loss in the loop
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

gradient_accumulation_steps, n_microbatches, vocab = 2, 4, 20
_gb.setup()
stage = torch.nn.Sequential(torch.nn.Embedding(vocab, 16), torch.nn.Linear(16, 32), torch.nn.GELU(),
                            torch.nn.Linear(32, vocab))
_gb.start(stage)
optimizer = torch.optim.SGD(stage.parameters(), lr=0.1)
scale_grads = True  # BUG
# FIX: scale_grads = False


def loss_fn(pred, labels):
    # rescale_accumulated_loss: the loss of each schedule step is divided by the accumulation steps
    loss = F.cross_entropy(pred.flatten(0, 1), labels.flatten()) / gradient_accumulation_steps
    # FIX: loss = loss / n_microbatches
    return loss


def schedule_step(tokens, labels):
    for mb_tokens, mb_labels in zip(tokens.chunk(n_microbatches), labels.chunk(n_microbatches)):
        loss_fn(stage(mb_tokens), mb_labels).backward()
    if scale_grads:
        for p in stage.parameters():
            if p.grad is not None:
                p.grad.div_(n_microbatches)


for step in range(4):
    optimizer.zero_grad()
    for micro_step in range(gradient_accumulation_steps):
        tokens = torch.randint(0, vocab, (16, 8))
        schedule_step(tokens, torch.roll(tokens, -1, dims=1))
    optimizer.step()
_gb.done(stage)
