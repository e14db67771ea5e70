"""GG102: clearing between backward and step, or on every micro-batch of a window."""
import torch


def zero_between_backward_and_step(model, loader, loss_fn, optimizer):
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.zero_grad()  # expect: GG102
        optimizer.step()


def zero_every_microbatch(model, loader, loss_fn, accum):
    optimizer = torch.optim.AdamW(model.parameters())
    for i, (x, y) in enumerate(loader):
        optimizer.zero_grad()  # expect: GG102
        loss = loss_fn(model(x), y) / accum
        loss.backward()
        if (i + 1) % accum == 0:
            optimizer.step()
    optimizer.step()  # expect: GG111


def zero_every_microbatch_at_the_end(model, loader, loss_fn, accum, opt):
    step = 0
    while step < 100:
        step += 1
        (loss_fn(model(step), step) / accum).backward()
        if step % accum == 0:
            opt.step()
        opt.zero_grad()  # expect: GG102


def zero_inside_the_step_branch_too_early(model, loader, loss_fn, accum, optimizer):
    for i, (x, y) in enumerate(loader):
        (loss_fn(model(x), y) / accum).backward()
        if (i + 1) % accum == 0:
            optimizer.zero_grad()  # expect: GG102
            optimizer.step()
    optimizer.step()  # expect: GG111


def flag_toggled_window_cleared_before_backward(model, loader, loss_fn, optimizer, args):
    # the accumulation branch clears at the window's end, before the closing backward
    for i, (x, y) in enumerate(loader):
        if args.accum > 1:
            if (i + 1) % args.accum == 0:
                optimizer.zero_grad()  # expect: GG102
            (loss_fn(model(x), y) / args.accum).backward()
            if (i + 1) % args.accum == 0:
                optimizer.step()
        else:
            optimizer.zero_grad()
            loss_fn(model(x), y).backward()
            optimizer.step()
    optimizer.step()


def clearing_under_an_if_with_the_backward(model, get_batch, optimizer, accum, iters):
    """Every finite micro-batch clears what the earlier ones accumulated."""
    for it in range(iters):
        for micro_step in range(accum):
            loss = model(get_batch()) / accum
            if torch.isfinite(loss):
                optimizer.zero_grad()  # expect: GG102
                loss.backward()
        optimizer.step()
