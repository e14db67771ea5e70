"""Correct: nanoGPT-style accumulation (no finding expected)."""
import torch

gradient_accumulation_steps = 40
grad_clip = 1.0
max_iters = 600000


def train(model, optimizer, scaler, get_batch, ctx, ddp):
    X, Y = get_batch("train")
    iter_num = 0
    while True:
        for micro_step in range(gradient_accumulation_steps):
            if ddp:
                # sync gradients only at the last micro step (nanoGPT's one visible line)
                model.require_backward_grad_sync = micro_step == gradient_accumulation_steps - 1
            with ctx:
                logits, loss = model(X, Y)
                loss = loss / gradient_accumulation_steps  # scale the loss to account for accumulation
            X, Y = get_batch("train")
            scaler.scale(loss).backward()
        if grad_clip != 0.0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        scaler.step(optimizer)
        scaler.update()
        # flush the gradients as soon as we can, no need for this memory anymore
        optimizer.zero_grad(set_to_none=True)
        lossf = loss.item() * gradient_accumulation_steps
        iter_num += 1
        if iter_num > max_iters:
            break
    return lossf


def seed_style_accumulation(model, loss_fn, train_loader, optimizer, device, accum_steps=4):
    model.train()
    optimizer.zero_grad(set_to_none=True)
    for step, (x, y) in enumerate(train_loader, start=1):
        x, y = x.to(device), y.to(device)
        loss = loss_fn(model(x), y) / accum_steps
        loss.backward()
        if step % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    if step % accum_steps != 0:
        for p in model.parameters():  # its losses were divided by accum_steps: weigh them by its own size
            if p.grad is not None:
                p.grad.mul_(accum_steps / (step % accum_steps))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
