"""dLLM-RL's SFT training loop: the batches are enumerated from 1 (`enumerate(progress_bar, start=1)`) but the optimizer steps when `(step + 1) % gradient_accumulation_steps == 0`, so the first window holds one micro-batch fewer than the accumulation count while each loss is still divided by the full count, and every later window is shifted by one batch (the epoch's last batch is left in the buffers).

source: Gen-Verse/dLLM-RL#7 (https://github.com/Gen-Verse/dLLM-RL/issues/7), "gradient_accumulation_steps": "for step, batch in enumerate(progress_bar, start=1): ... loss_lm = loss_lm / accelerator.gradient_accumulation_steps ... accelerator.backward(loss_lm); if (step + 1) % accelerator.gradient_accumulation_steps == 0: ... optimizer.step() ... Based on my understanding, it seems this should be step rather than step+1, since your step starts from 1." (closed). The training script was not read beyond the issue's excerpt; accelerate's backward and clip are reduced to plain torch calls (the accelerator is not given an accumulation count); the diffusion language model is reduced to an MLP regressor. The twin tests `step % gradient_accumulation_steps`, the issue's proposal
family: underscaled-window
shape: AdamW(lr=1e-3), gradient_accumulation_steps = 4, max_grad_norm 1.0; 12 micro-batches of 8
numeric: the first window applies 3/4 of its mean gradient; the next windows mix micro-batches across the intended boundaries
watch: GG111
lint: out: which index the loop counts from and which test it steps on are arithmetic on a counter evaluated at run time
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

gradient_accumulation_steps = 4
_gb.setup()
batches = [(torch.randn(8, 10), torch.randn(8, 1)) for _ in range(12)]
model = torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.GELU(), torch.nn.Linear(32, 1))
_gb.start(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step, (x, y) in enumerate(batches, start=1):
    loss_lm = F.mse_loss(model(x), y)
    loss_lm = loss_lm / gradient_accumulation_steps
    loss_lm.backward()
    if (step + 1) % gradient_accumulation_steps == 0:  # BUG
    # FIX: if step % gradient_accumulation_steps == 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
_gb.done(model)
