"""GG102: correct code of the same shapes (no finding expected)."""
import torch


def skip_non_finite(model, loader, loss_fn, optimizer):
    for x, y in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        if not torch.isfinite(loss):
            continue
        optimizer.step()


def skip_by_clearing(model, loader, loss_fn, optimizer):
    for x, y in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        if not torch.isfinite(loss):
            optimizer.zero_grad()
        optimizer.step()


def gan_clears_the_other_optimizer(netD, netG, optD, optG, loader, loss_fn):
    for x in loader:
        optG.zero_grad()
        lossG = loss_fn(netD(netG(x)))
        lossG.backward()
        optD.zero_grad()  # D's .grad was filled by lossG: cleared on purpose
        optG.step()
        lossD = loss_fn(netD(x))
        lossD.backward()
        optD.step()


def accumulate_correctly(model, loader, loss_fn, accum, optimizer):
    assert len(loader) % accum == 0  # whole windows: every loss is divided by accum
    optimizer.zero_grad()
    for i, (x, y) in enumerate(loader):
        (loss_fn(model(x), y) / accum).backward()
        if (i + 1) % accum == 0 or i + 1 == len(loader):
            optimizer.step()
            optimizer.zero_grad()


def drop_one_frozen_gradient(model, loader, loss_fn, optimizer):
    for x, y in loader:
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        model.embedding.weight.grad = None  # keep the embedding fixed this step
        optimizer.step()


def freeze_encoder_for_this_step(model, loader, loss_fn, optimizer):
    for x, y in loader:
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        model.encoder.zero_grad()
        optimizer.step()


def clear_per_optimizer(models, optimizers, loader, loss_fn):
    for x, y in loader:
        for opt in optimizers:
            opt.zero_grad()
        sum(loss_fn(m(x), y) for m in models).backward()
        for opt in optimizers:
            opt.step()


def clearing_on_the_first_micro_step_only(model, get_batch, optimizer, accum, iters):
    for it in range(iters):
        for micro_step in range(accum):
            loss = model(get_batch()) / accum
            if micro_step == 0:
                optimizer.zero_grad()
                loss.backward()
            else:
                loss.backward()
        optimizer.step()


def clearing_on_a_first_pass_flag(model, micro_batches, optimizer, accum, iters):
    for it in range(iters):
        first = True
        for batch in micro_batches:
            loss = model(batch) / accum
            if first:
                optimizer.zero_grad()
                first = False
                loss.backward()
            else:
                loss.backward()
        optimizer.step()
