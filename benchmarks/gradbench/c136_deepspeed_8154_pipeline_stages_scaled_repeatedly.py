"""DeepSpeed PipelineEngine: every pipeline stage registers a backward hook on its output that divides the incoming gradient by gradient_accumulation_steps; the last stage's division is the window's averaging, but each earlier stage divides the already divided gradient again, so stage s of S gets 1/K^(S-s) of its gradient.

source: deepspeedai/DeepSpeed#8154 (https://github.com/deepspeedai/DeepSpeed/pull/8154, merged, fixes #8152), "Fix repeated gradient scaling across pipeline stages": "Every pipeline stage registers an output backward hook that scales gradients by gradient_accumulation_steps. The last stage therefore scales the gradient correctly before sending it upstream, but each preceding stage scales the already-scaled gradient again." Fix: "Apply gradient accumulation scaling only at the last pipeline stage"; the reviewer (tohtana) approves. The engine's code was not read: the stages run in one process (each stage's output hook divides as the PR describes, and the activation passes to the next stage as the pipeline's send/recv would); the loss is not divided (the hooks do it). The twin registers the hook on the last stage only, as the fix does
family: overscaled
shape: two stages (Linear-Tanh, Linear); for each stage output in training: out.register_hook(lambda g: g / gradient_accumulation_steps); K = gradient_accumulation_steps = 4 micro-batches per window of undivided mean MSE losses; loss.backward() per micro-batch; optimizer.step(); optimizer.zero_grad() per window. SGD(lr=0.05), 4 windows
numeric: the last stage gets the window mean; the first stage gets 1/4 of it
watch: GG113
lint: out: the division happens in backward hooks registered on the stages' outputs inside the engine, not in the loop's text
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

gradient_accumulation_steps = 4


class PipelineModule(torch.nn.Module):
    def __init__(self, stages):
        super().__init__()
        self.stages = torch.nn.ModuleList(stages)

    def _scale_hook(self, stage_id):
        def hook(grad):
            return grad / gradient_accumulation_steps
        return hook

    def forward(self, x):
        num_stages = len(self.stages)
        for stage_id, stage in enumerate(self.stages):
            x = stage(x)
            if self.training and x.requires_grad:
                # FIX: if stage_id == num_stages - 1:
                # FIX:     x.register_hook(self._scale_hook(stage_id))
                x.register_hook(self._scale_hook(stage_id))  # BUG
        return x


_gb.setup()
model = PipelineModule([torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.Tanh()), torch.nn.Linear(12, 1)])
_gb.start(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
data = [(torch.randn(4, 6), torch.randn(4, 1)) for _ in range(16)]
for i, (x, y) in enumerate(data):
    loss = F.mse_loss(model(x), y)
    loss.backward()
    if (i + 1) % gradient_accumulation_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
_gb.done(model)
