"""Accelerate's `sync_each_batch` option (synchronise gradients on every batch during accumulation, to save memory under DDP) was implemented by setting `sync_gradients` to True on every batch, but the `AcceleratedOptimizer` also reads `sync_gradients` to decide whether to step and clear, so with gradient accumulation the optimizer stepped on every micro-batch, each time with a micro-batch loss already divided by the accumulation steps.

source: huggingface/accelerate#2790 (https://github.com/huggingface/accelerate/pull/2790), "Fix Wrong use of sync_gradients used to implement sync_each_batch" (merged): "the fix of #29425 was incorrect all this while, due to a misunderstanding of how `sync_gradients` is used to signal also optimizer step" (fixes transformers #29425 and accelerate #2531). The Accelerate pieces involved are written out (the gradient state, `accumulate()` setting sync_gradients, `backward()` dividing by the accumulation steps, and the optimizer wrapper that steps and clears only when sync_gradients is True) in one process, where the DDP synchronisation itself does nothing; the model is an MLP classifier. The twin leaves sync_gradients to the window boundary and uses sync_each_batch only for the synchronisation, as the fix does
family: misplaced-step
shape: SGD(lr=0.1), gradient_accumulation_steps = 4, sync_each_batch = True, 12 batches of 8
numeric: the bug takes 12 steps of a quarter of one micro-batch's gradient; the twin 3 steps of the window mean
watch: GG111
lint: out: when the optimizer wrapper steps is decided by the framework's gradient state at run time
bug-step: 1
"""
import contextlib

import torch
import torch.nn.functional as F

import _gb

gradient_accumulation_steps, sync_each_batch = 4, True
_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.ReLU(), torch.nn.Linear(32, 3))
_gb.start(model)
state = {"sync_gradients": True, "step": 0}


class AcceleratedOptimizer:
    def __init__(self, optimizer):
        self.optimizer = optimizer

    def step(self):
        if state["sync_gradients"]:
            self.optimizer.step()

    def zero_grad(self):
        if state["sync_gradients"]:
            self.optimizer.zero_grad()


@contextlib.contextmanager
def accumulate():
    state["step"] += 1
    end_of_window = state["step"] % gradient_accumulation_steps == 0
    state["sync_gradients"] = end_of_window or sync_each_batch  # BUG
    # FIX: state["sync_gradients"] = end_of_window
    yield  # (with sync_each_batch, DDP would also run without no_sync here; one process has nothing to sync)


def backward(loss):
    (loss / gradient_accumulation_steps).backward()


optimizer = AcceleratedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1))
for batch_idx in range(12):
    x, y = torch.randn(8, 12), torch.randint(0, 3, (8,))
    with accumulate():
        backward(F.cross_entropy(model(x), y))
        optimizer.step()
        optimizer.zero_grad()
_gb.done(model)
