"""nanoGPT's full loop: DDP sync toggled per micro-step, GradScaler, clipping, lr schedule by hand."""
import math

import torch

gradient_accumulation_steps = 5 * 8
grad_clip = 1.0
learning_rate = 6e-4
warmup_iters = 2000
lr_decay_iters = 600000
min_lr = 6e-5
max_iters = 600000


def get_lr(it):
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
    return min_lr + coeff * (learning_rate - min_lr)


def train(model, optimizer, get_batch, ctx, ddp, dtype):
    scaler = torch.cuda.amp.GradScaler(enabled=(dtype == "float16"))
    X, Y = get_batch("train")
    iter_num = 0
    while True:
        lr = get_lr(iter_num)
        for param_group in optimizer.param_groups:
            param_group["lr"] = lr
        for micro_step in range(gradient_accumulation_steps):
            if ddp:
                model.require_backward_grad_sync = micro_step == gradient_accumulation_steps - 1
            with ctx:
                logits, loss = model(X, Y)
                loss = loss / gradient_accumulation_steps
            X, Y = get_batch("train")
            scaler.scale(loss).backward()
        if grad_clip != 0.0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        iter_num += 1
        if iter_num > max_iters:
            break
