"""GG201: a loss tensor accumulated for logging without .item() or .detach()."""
import torch


def running_total(model, loader, loss_fn, optimizer):
    total_loss = 0
    for x, y in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        total_loss += loss  # expect: GG201
    return total_loss


def weighted_total(model, loader, loss_fn, optimizer):
    running = 0.0
    for x, y in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        running = running + loss * x.size(0)  # expect: GG201
    return running


def epoch_loss_times_batch(model, loader, loss_fn, optimizer):
    epoch_loss = 0.0
    for x, y in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        epoch_loss += loss * x.size(0)  # expect: GG201
    return epoch_loss


def scaled_loss_logged_raw(model, loader, loss_fn, optimizer, accum):
    logged = 0.0
    for i, (x, y) in enumerate(loader):
        raw = loss_fn(model(x), y)
        scaled = raw / accum
        scaled.backward()
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
        shown = raw.float()
        logged += shown  # expect: GG201
    optimizer.step()  # expect: GG111


def evaluate_returns_total(model, loader, loss_fn):
    """An evaluation that returns its sum is still an evaluation: no no_grad, every graph kept."""
    model.eval()
    total_loss = 0.0
    for x, y in loader:
        loss = loss_fn(model(x), y)
        total_loss += loss  # expect: GG201
    return total_loss / len(loader)


def validate_with_a_comment(model, valid_dl, loss_fn):
    """`model.eval()` does not turn gradients off; a comment naming an event word (accumulate)
    must not hide the evaluation loop."""
    losses = 0
    model.eval()
    for src, tgt in valid_dl:
        logits = model(src)
        # compute the loss and accumulate it
        loss = loss_fn(logits, tgt)
        losses += loss  # expect: GG201
    return losses / len(valid_dl)


def detection_loss(pred, target):
    box = (pred[:, :4] - target[:, :4]).abs().mean()
    cls = torch.nn.functional.binary_cross_entropy_with_logits(pred[:, 4:], target[:, 4:])
    return box + cls, {"BoxLoss": box, "BCELoss": cls}


def loss_parts_summed_into_a_dict(model, loader, optimizer, totals):
    """The helper returns the loss and its parts; the parts carry the loss's graph."""
    for images, targets in loader:
        optimizer.zero_grad()
        loss, parts = detection_loss(model(images), targets)
        loss.backward()
        optimizer.step()
        for name, value in parts.items():
            totals[name] += value * images.shape[0]  # expect: GG201
