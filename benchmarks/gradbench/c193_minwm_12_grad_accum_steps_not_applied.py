"""minWM Wan2.1 camera trainers: `grad_accum_steps` enters the effective batch-size check (dp * grad_accum_steps, which the assertion asks to raise when below 16), but the trainers' loops step and clear the optimizer after every micro-batch, so no gradient is ever accumulated and each update uses one micro-batch.

source: shengshu-ai/minWM#12 (https://github.com/shengshu-ai/minWM/issues/12), "[Question/Bug] grad_accum_steps is used by the effective batch-size check but not applied in Wan21 camera trainers" (labelled solved): "grad_accum_steps appears to be used by this guard, but I could not find corresponding gradient accumulation in the target camera trainers", quoting ga = getattr(config, "grad_accum_steps", 1); bsz = dp * ga. The trainers were not read: the loop is the issue's reading (loss.backward(); optimizer.step(); optimizer.zero_grad() on every micro-batch); the video model is reduced to an MLP regressor, one process (dp = 1), grad_accum_steps = 4. The twin accumulates grad_accum_steps micro-batches (each loss divided by it) per step, what the configuration promises
family: misplaced-step
shape: AdamW(lr=1e-3), grad_accum_steps = 4; 12 micro-batches of 4
numeric: 12 steps of one micro-batch each instead of 3 steps on windows of 4
watch: out: every step applies its own micro-batch's gradient once and clears it; whether a configured accumulation is carried out is the program's intent
lint: out: a loop that steps on every batch is an ordinary training loop; the configuration value it ignores is the program's intent
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class Config:
    grad_accum_steps = 4
    batch_size = 4


config = Config()
dp = 1
ga = getattr(config, "grad_accum_steps", 1)
assert dp * ga * config.batch_size >= 16, "increase grad_accum_steps"
_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(20, 48), torch.nn.SiLU(), torch.nn.Linear(48, 20))
_gb.start(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(12):
    latents = torch.randn(config.batch_size, 20)
    noise = torch.randn(config.batch_size, 20)
    loss = F.mse_loss(model(latents + noise), noise)
    # FIX: loss = loss / ga
    loss.backward()
    optimizer.step()  # BUG
    optimizer.zero_grad()  # BUG
    # FIX: if (step + 1) % ga == 0:
    # FIX:     optimizer.step()
    # FIX:     optimizer.zero_grad()
_gb.done(model)
