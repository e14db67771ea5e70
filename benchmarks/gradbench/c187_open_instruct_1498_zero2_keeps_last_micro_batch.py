"""open-instruct manual accumulation under DeepSpeed ZeRO-2: the DeepSpeed config has `gradient_accumulation_steps=1`, so every `backward()` is an accumulation boundary; at a boundary ZeRO-2's epilogue copies the accumulated gradient into the partition it steps and resets its accumulator, so each micro-batch overwrites the last and only the final micro-batch's gradient reaches `step()`.

source: allenai/open-instruct#1498 (https://github.com/allenai/open-instruct/pull/1498), "Fix ZeRO-2 discarding gradients during manual accumulation" (merged): "With gradient_accumulation_steps=1 in the DS config, every backward() call is treated as a gradient accumulation boundary. In ZeRO-2 (stage_1_and_2.py:881), hitting the boundary resets the internal gradient accumulator (all_grad_tensors[i] = None), so only the last micro-batch's gradient survives to step() ... Uses DeepSpeed's set_gradient_accumulation_boundary() API to explicitly mark only the final backward before step() as the boundary." DeepSpeed is not installed here and was not read: the engine is written as the pull request's excerpt describes stage 1-2 (after each backward the parameters' gradients go into a per-parameter accumulator and .grad is freed; at a boundary the accumulator becomes the averaged gradient that step() applies and is reset); one process, the policy reduced to an MLP regressor, each micro-batch loss divided by the window's 4. The twin marks only the last micro-batch of each window as the boundary, the fix
family: dropped-window
shape: AdamW(lr=1e-3) inside the engine; 4 micro-batches of 8 per step, 3 steps
numeric: every step applies a quarter of the last micro-batch's gradient instead of the window mean
watch: out: DeepSpeed's partitioned accumulator is not the parameters' .grad; the gradients it drops have left the buffers the watch follows
lint: out: which backward pass is an accumulation boundary is the engine's configuration at run time
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class Zero2Engine:
    """Stage-2 style gradient handling: .grad is moved into a partition after every backward pass."""

    def __init__(self, module, lr):
        self.module = module
        self.params = list(module.parameters())
        self.optimizer = torch.optim.AdamW(self.params, lr=lr)
        self.all_grad_tensors = [None] * len(self.params)
        self.averaged_gradients = [None] * len(self.params)
        self.is_gradient_accumulation_boundary = True

    def set_gradient_accumulation_boundary(self, flag):
        self.is_gradient_accumulation_boundary = flag

    def backward(self, loss):
        loss.backward()
        for i, p in enumerate(self.params):
            g = p.grad.detach().clone()
            p.grad = None
            acc = g if self.all_grad_tensors[i] is None else self.all_grad_tensors[i] + g
            if self.is_gradient_accumulation_boundary:
                self.averaged_gradients[i] = acc
                self.all_grad_tensors[i] = None
            else:
                self.all_grad_tensors[i] = acc

    def step(self):
        for p, g in zip(self.params, self.averaged_gradients):
            p.grad = g
        self.optimizer.step()
        self.optimizer.zero_grad()
        self.averaged_gradients = [None] * len(self.params)


_gb.setup()
policy = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 1))
_gb.start(policy)
engine = Zero2Engine(policy, lr=1e-3)
gradient_accumulation_steps = 4
for step in range(3):
    micro_batches = [(torch.randn(8, 16), torch.randn(8, 1)) for _ in range(gradient_accumulation_steps)]
    for k, (x, y) in enumerate(micro_batches):
        engine.set_gradient_accumulation_boundary(True)  # BUG
        # FIX: engine.set_gradient_accumulation_boundary(k == gradient_accumulation_steps - 1)
        loss = F.mse_loss(policy(x), y) / gradient_accumulation_steps
        engine.backward(loss)
    engine.step()
_gb.done(policy)
