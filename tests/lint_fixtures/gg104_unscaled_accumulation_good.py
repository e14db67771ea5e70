"""GG104: correct code of the same shapes (no finding expected)."""
import torch
import torch.nn.functional as F


def divided(model, loader, accum, optimizer):
    assert len(loader) % accum == 0  # whole windows: every loss is divided by accum
    for i, (x, y) in enumerate(loader):
        loss = F.cross_entropy(model(x), y)
        loss = loss / accum
        loss.backward()
        if (i + 1) % accum == 0 or i + 1 == len(loader):
            optimizer.step()
            optimizer.zero_grad()


def divided_inline(model, loader, accum, optimizer):
    assert len(loader) % accum == 0  # whole windows: every loss is divided by accum
    for i, (x, y) in enumerate(loader):
        raw_loss = F.cross_entropy(model(x), y)
        (raw_loss / accum).backward()
        if (i + 1) % accum == 0 or i + 1 == len(loader):
            optimizer.step()
            optimizer.zero_grad()


def summed_loss(model, loader, accum, optimizer, n_total):
    for i, (x, y) in enumerate(loader):
        loss = F.cross_entropy(model(x), y, reduction="sum")
        loss.backward()
        if (i + 1) % accum == 0 or i + 1 == len(loader):
            for p in model.parameters():
                p.grad /= n_total
            optimizer.step()
            optimizer.zero_grad()


def loss_from_helper(model, loader, accum, optimizer):
    for i, batch in enumerate(loader):
        loss = compute_loss(model, batch)
        loss.backward()
        if (i + 1) % accum == 0 or i + 1 == len(loader):
            optimizer.step()
            optimizer.zero_grad()


def compute_loss(model, batch):
    return model(batch).mean() / 4


def multitask_sum(model, batch, losses_fns, optimizer, loader):
    for x, y in loader:
        optimizer.zero_grad()
        for fn in losses_fns:
            fn(model(x), y).backward()
        optimizer.step()




def loss_divided_then_rebound_for_logging(fabric, model, optimizer, loader, meter, accum):
    assert len(loader) % accum == 0
    for i, (x, y) in enumerate(loader):
        loss = cross_entropy(model(x), y) / accum
        fabric.backward(loss)
        meter.update(loss.detach())
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
        loss = meter.compute().item()


DISTILL_ACCUM, DISTILL_ALPHA = 4, 0.5


def distillation_weighted_sum_divided(student, teacher, loader, optimizer):
    assert len(loader) % DISTILL_ACCUM == 0  # whole windows
    for i, (x, y) in enumerate(loader):
        s_logits, t_logits = student(x), teacher(x)
        kd = F.kl_div(F.log_softmax(s_logits, -1), F.softmax(t_logits, -1), reduction="batchmean")
        loss = (DISTILL_ALPHA * kd + (1 - DISTILL_ALPHA) * F.cross_entropy(s_logits, y)) / DISTILL_ACCUM
        loss.backward()
        if (i + 1) % DISTILL_ACCUM == 0:
            optimizer.step()
            optimizer.zero_grad()


def weight_that_is_one_over_the_window(model, loader, optimizer):
    """0.25 with windows of 4: the weight is the division by the window size."""
    assert len(loader) % DISTILL_ACCUM == 0  # whole windows
    for i, (x, y) in enumerate(loader):
        loss = 0.25 * F.cross_entropy(model(x), y)
        loss.backward()
        if (i + 1) % DISTILL_ACCUM == 0:
            optimizer.step()
            optimizer.zero_grad()


def weight_of_unknown_value(model, loader, optimizer, accum, coeff):
    """`coeff` is a parameter: it may be 1/accum, nothing proves the loss undivided."""
    assert len(loader) % accum == 0  # whole windows
    for i, (x, y) in enumerate(loader):
        loss = coeff * F.cross_entropy(model(x), y)
        loss.backward()
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()


def closures_of_the_loop_body_called_from_both_branches(model, loader, loss_fn, optimizer, accum, has_no_sync):
    """timm's train.py: `_forward` / `_backward` are defined in the loop body and called from the
    `no_sync` branch and from the other; the first element it returns is divided by the window."""
    last_batch_idx = len(loader) - 1
    last_accum_steps = len(loader) % accum
    last_batch_idx_to_accum = len(loader) - last_accum_steps
    accum_steps = accum
    optimizer.zero_grad()
    for batch_idx, (x, y) in enumerate(loader):
        need_update = batch_idx == last_batch_idx or (batch_idx + 1) % accum_steps == 0
        if batch_idx >= last_batch_idx_to_accum:
            accum_steps = last_accum_steps

        def _forward():
            _loss = loss_fn(model(x), y)
            return _loss / accum_steps, _loss.detach()

        def _backward(_loss):
            _loss.backward()
            if need_update:
                optimizer.step()

        if has_no_sync and not need_update:
            with model.no_sync():
                loss, _ = _forward()
                _backward(loss)
        else:
            loss, _ = _forward()
            _backward(loss)

        if not need_update:
            continue
        optimizer.zero_grad()


def ignite_amp_factory_returning_its_update(model, optimizer, loss_fn, accum, scaler):
    """ignite's `supervised_training_step_amp`: the loss divided by the window goes through
    `typing.cast` and the scaler to backward."""
    from typing import cast

    from ignite.engine import Engine

    def update(engine: Engine, batch):
        if (engine.state.iteration - 1) % accum == 0:
            optimizer.zero_grad()
        x, y = batch
        loss = loss_fn(model(x), y)
        if accum > 1:
            loss = loss / accum
        if scaler:
            cast(torch.Tensor, scaler.scale(loss)).backward()
            if engine.state.iteration % accum == 0:
                scaler.step(optimizer)
                scaler.update()
        else:
            loss.backward()
            if engine.state.iteration % accum == 0:
                optimizer.step()
        return loss.item()

    return update


def update_factory_for_an_engine_of_another_library(model, optimizer, loss_fn, accum):
    """The closure's engine is no ignite Engine: nothing says that it runs once per batch."""
    from mylib import Engine

    def update(engine: Engine, batch):
        x, y = batch
        loss_fn(model(x), y).backward()
        if engine.state.iteration % accum == 0:
            optimizer.step()
            optimizer.zero_grad()

    return update
