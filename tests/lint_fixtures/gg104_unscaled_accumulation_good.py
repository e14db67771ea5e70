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
