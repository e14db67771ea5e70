"""SLAM-LLM training under DeepSpeed with gradient accumulation: the training loop divides each micro-batch's loss by `gradient_accumulation_steps` and then calls `model_engine.backward(loss)`, which divides the loss by the engine's accumulation steps again (DeepSpeed scales the loss by the steps in its backward), so every window's gradient is the mean divided by the accumulation steps once more.

source: X-LANCE/SLAM-LLM#144 (https://github.com/X-LANCE/SLAM-LLM/issues/144), "loss value seems wrong when after setting gradient_accumulate_step>1 in Deepspeed training": "with deepspeed, with gradient accumulate=1 initial loss is 8, but with gradient accumulate=10 the loss value is 0.8". A commenter (fclearner): "try this: model_engine.backward(loss) ... sorry, remove gradient_accumulation_steps is enough" (open; no maintainer answer: unconfirmed). The deepspeed training utilities were not read: the loop follows the issue and the comment (the loss divided by the configured gradient_accumulation_steps, then model_engine.backward and model_engine.step); the engine is reduced to DeepSpeed's accumulation bookkeeping (backward divides the loss by its gradient_accumulation_steps, step steps and clears at the boundary), with the same 10 accumulation steps as the issue; the speech LLM is reduced to an MLP classifier trained with SGD. The twin drops the loop's division, the comment's fix
family: overscaled
shape: SGD(lr=0.5, momentum=0.9) in the engine, gradient_accumulation_steps = 10 in both the train config and the engine; micro-batches of 8, 3 steps
numeric: every step applies the window's mean gradient divided by 10
watch: GG113
lint: GG113
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class DeepSpeedEngine:
    """The accumulation bookkeeping of deepspeed.DeepSpeedEngine (backward scales the loss by the steps)."""

    def __init__(self, module, optimizer, gradient_accumulation_steps):
        self.module, self.optimizer = module, optimizer
        self.gradient_accumulation_steps = gradient_accumulation_steps
        self.micro_steps = 0

    def __call__(self, *args):
        return self.module(*args)

    def backward(self, loss):
        if self.gradient_accumulation_steps > 1:
            loss = loss / self.gradient_accumulation_steps
        loss.backward()

    def step(self):
        if (self.micro_steps + 1) % self.gradient_accumulation_steps == 0:
            self.optimizer.step()
            self.optimizer.zero_grad()
        self.micro_steps += 1


gradient_accumulation_steps = 10
_gb.setup()
net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 5))
_gb.start(net)
model_engine = DeepSpeedEngine(net, torch.optim.SGD(net.parameters(), lr=0.5, momentum=0.9), gradient_accumulation_steps)
data = [(torch.randn(8, 16), torch.randint(0, 5, (8,))) for _ in range(30)]
for x, y in data:
    loss = F.cross_entropy(model_engine(x), y)
    loss = loss / gradient_accumulation_steps  # BUG
    model_engine.backward(loss)
    model_engine.step()
_gb.done(net)
