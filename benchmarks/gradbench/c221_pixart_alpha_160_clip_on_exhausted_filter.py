"""PixArt-alpha LoRA training script: `lora_layers` is created with `filter(lambda p: p.requires_grad, ...)`, an iterator that is consumed when the optimizer is built from it, so the later `accelerator.clip_grad_norm_(params_to_clip, max_grad_norm)` with `params_to_clip = lora_layers` receives an empty sequence and no gradient is ever clipped.

source: PixArt-alpha/PixArt-alpha#160 (https://github.com/PixArt-alpha/PixArt-alpha/pull/160), "fix iterator for params_to_clip" (open: unconfirmed): "the missing list would result in an empty params_to_clip, leading to not clipping any grad norm ... since the lora_layers was initialized with filter() it would be only iteratable only once. so the call accelerator.clip_grad_norm_() on line 888 would always get an empty list. so no gradient clipping would be done." The script was not read beyond the pull request: accelerator.clip_grad_norm_ is torch.nn.utils.clip_grad_norm_ on one process; the transformer with LoRA is reduced to a frozen linear base with a trainable low-rank adapter; max_grad_norm 0.05 so the clip binds. The twin wraps the filter in list(), the fix
family: clip-misplaced
shape: AdamW(lr=1e-3) on the LoRA weights, clip_grad_norm_(max_norm=0.05); 6 steps on batches of 8
numeric: every step applies the unclipped gradient instead of one clipped to norm 0.05
watch: out: no clip runs on any gradient; a norm over an empty list leaves nothing in the gradient buffers to check
lint: out: which parameters an iterator still yields when the clip runs is known only at run time
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class LoRALinear(torch.nn.Module):
    def __init__(self, d_in, d_out, rank=4):
        super().__init__()
        self.base = torch.nn.Linear(d_in, d_out)
        self.base.requires_grad_(False)
        self.lora_down = torch.nn.Linear(d_in, rank, bias=False)
        self.lora_up = torch.nn.Linear(rank, d_out, bias=False)
        torch.nn.init.normal_(self.lora_up.weight, std=0.1)

    def forward(self, x):
        return self.base(x) + self.lora_up(self.lora_down(x))


max_grad_norm = 0.05
_gb.setup()
transformer = torch.nn.Sequential(LoRALinear(16, 32), torch.nn.GELU(), LoRALinear(32, 16))
_gb.start(transformer)
lora_layers = filter(lambda p: p.requires_grad, transformer.parameters())  # BUG
# FIX: lora_layers = list(filter(lambda p: p.requires_grad, transformer.parameters()))
optimizer = torch.optim.AdamW(lora_layers, lr=1e-3)
data = [(torch.randn(8, 16), torch.randn(8, 16)) for _ in range(6)]
for x, target in data:
    loss = F.mse_loss(transformer(x), target)
    loss.backward()
    params_to_clip = lora_layers
    torch.nn.utils.clip_grad_norm_(params_to_clip, max_grad_norm)
    optimizer.step()
    optimizer.zero_grad()
_gb.done(transformer)
