"""minimind train_pretrain.py: every micro-batch loss is divided by `args.accumulation_steps`, and the residual step after the loop (for a last window shorter than accumulation_steps) unscales, clips and steps on those gradients as they are, so each epoch's trailing partial window is applied at rem / accumulation_steps of its weight.

source: jingyaogong/minimind#749 (https://github.com/jingyaogong/minimind/issues/749), "train_pretrain中args.accumulation_steps梯度累积部分的疑惑": the residual step `if last_step > start_step and last_step % args.accumulation_steps != 0: scaler.unscale_(optimizer); clip_grad_norm_(model.parameters(), args.grad_clip); scaler.step(optimizer); scaler.update(); optimizer.zero_grad(set_to_none=True)` runs on gradients of `loss = loss / args.accumulation_steps`, while the trailing window "should be divided by last_step % args.accumulation_steps". The author (jingyaogong): "严格来说确实存在" (strictly speaking it does exist); the trailing step amounts to a smaller effective learning rate, at most once per epoch. The trainer was not read beyond the issue's quotes: the model is reduced to a small MLP language model, the scaler is the disabled one of the default bfloat16 run (enabled only for float16); 2 epochs of 10 micro-batches with accumulation_steps = 4 (a trailing window of 2 each epoch). The twin divides each loss by the size of the window it belongs to, which gives the same gradients as the issue's proposed rescale
family: underscaled-window
shape: AdamW(lr=5e-3), grad_clip = 1.0, accumulation_steps = 4; windows 4, 4, 2 per epoch, 2 epochs
numeric: the third and sixth steps use half the window's mean gradient
watch: GG111
lint: GG111
bug-step: 3
"""
import torch
import torch.nn.functional as F

import _gb

accumulation_steps, grad_clip, vocab = 4, 1.0, 20
_gb.setup()
model = torch.nn.Sequential(torch.nn.Embedding(vocab, 16), torch.nn.Tanh(), torch.nn.Linear(16, vocab))
_gb.start(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3)
scaler = torch.amp.GradScaler("cpu", enabled=False)
data = torch.randint(0, vocab, (10, 4, 9))
iters = len(data)
for epoch in range(2):
    last_step = 0
    for step, batch in enumerate(data, start=1):
        res = model(batch[:, :-1])
        loss = F.cross_entropy(res.reshape(-1, vocab), batch[:, 1:].reshape(-1))
        loss = loss / accumulation_steps  # BUG
        # FIX: loss = loss / min(accumulation_steps, iters - (step - 1) // accumulation_steps * accumulation_steps)
        scaler.scale(loss).backward()
        if step % accumulation_steps == 0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
        last_step = step
    if last_step % accumulation_steps != 0:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
_gb.done(model)
