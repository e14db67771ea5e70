"""GG103: correct code of the same shapes (no finding expected)."""
import contextlib
import itertools

import torch


def remainder_stepped_after(model, loader, loss_fn, accum, optimizer):
    for step, (x, y) in enumerate(loader, start=1):
        (loss_fn(model(x), y) / accum).backward()
        if step % accum == 0:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    if step % accum != 0:
        for p in model.parameters():  # its losses were divided by accum: weigh them by its own size
            if p.grad is not None:
                p.grad.mul_(accum / (step % accum))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def remainder_in_condition(model, loader, loss_fn, accum, optimizer):
    n = len(loader)
    for i, (x, y) in enumerate(loader):
        window = min(accum, n - i // accum * accum)  # the last window may be shorter
        (loss_fn(model(x), y) / window).backward()
        if (i + 1) % accum == 0 or (i + 1) == len(loader):
            optimizer.step()
            optimizer.zero_grad()


def remainder_in_second_step(model, loader, loss_fn, accum, optimizer):
    last = len(loader) - 1
    for i, (x, y) in enumerate(loader):
        (loss_fn(model(x), y) / accum).backward()
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
        elif i == last:
            optimizer.step()
            optimizer.zero_grad()


def whole_windows(model, data, loss_fn, accum, optimizer, steps):
    for i in range(steps * accum):
        (loss_fn(model(data[i])) / accum).backward()
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()


def count_asserted_to_divide(model, loader, loss_fn, accum, optimizer):
    assert len(loader) % accum == 0, "the loader must hold whole windows"
    for i, (x, y) in enumerate(loader):
        (loss_fn(model(x), y) / accum).backward()
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()


def whole_windows_sliced(model, loader, loss_fn, accum, optimizer, n_windows):
    for i, (x, y) in enumerate(itertools.islice(loader, n_windows * accum)):
        (loss_fn(model(x), y) / accum).backward()
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()


MAX_ITERS = 600
GRAD_ACCUM = 4


def module_constants_divide(model, get_batch, loss_fn, optimizer):
    for it in range(1, MAX_ITERS + 1):
        x, y = get_batch()
        (loss_fn(model(x), y) / GRAD_ACCUM).backward()
        if it % GRAD_ACCUM == 0:
            optimizer.step()
            optimizer.zero_grad()


def stops_on_its_own_index(model, loader, loss_fn, accum, optimizer, n_windows):
    for i, (x, y) in enumerate(loader):
        (loss_fn(model(x), y) / accum).backward()
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
        if i + 1 == n_windows * accum:
            break


def literal_data_fits_the_window(model, loss_fn, optimizer):
    accum = 4
    sizes = [40, 12, 33, 7, 25, 25, 9, 30]
    for i, n in enumerate(sizes):
        (loss_fn(model(n)) / accum).backward()
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()


def window_test_through_a_name_with_the_last_batch(model, loader, loss_fn, optimizer, accumulation_steps):
    assert len(loader) % accumulation_steps == 0  # whole windows: every loss is divided by accumulation_steps
    for i, (inputs, labels) in enumerate(loader):
        last_of_window = (i + 1) % accumulation_steps == 0 or i + 1 == len(loader)
        ctx = contextlib.nullcontext() if last_of_window else model.no_sync()
        with ctx:
            (loss_fn(model(inputs), labels) / accumulation_steps).backward()
        if last_of_window:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)


def constants_unpacked_divide(model, get_batch, loss_fn, optimizer):
    accumulation_steps, sparsity_coeff = 2, 0.1  # 10 micro-batches: five whole windows
    for batch_idx in range(10):
        x = get_batch()
        loss = loss_fn(model(x)) + sparsity_coeff * model(x).abs().mean()
        (loss / accumulation_steps).backward()
        if (batch_idx + 1) % accumulation_steps == 0:
            optimizer.step()
            optimizer.zero_grad()


ACCUM_GRAD = 2


def module_constant_in_a_function(model, get_batch, loss_fn, optimizer):
    for batch_idx in range(6):  # three whole windows of the module's ACCUM_GRAD
        (loss_fn(model(get_batch())) / ACCUM_GRAD).backward()
        if (batch_idx + 1) % ACCUM_GRAD == 0:
            optimizer.step()
            optimizer.zero_grad()


def counter_carried_across_epochs(model, loss_fn, optimizer, make_batch):
    accum = 4
    data = [make_batch() for _ in range(3)]
    step = 0  # set once: a window left open at an epoch's end is closed in the next epoch
    for epoch in range(4):  # 4 x 3 = 12 micro-batches: three whole windows
        for x, y in data:
            (loss_fn(model(x), y) / accum).backward()
            step += 1
            if step % accum == 0:
                optimizer.step()
                optimizer.zero_grad()


def list_built_by_appending(model, loss_fn, optimizer, make_batch):
    accum = 2
    batches = []
    for n in (10, 2, 3, 10, 1, 8):  # six micro-batches: three whole windows
        batches.append(make_batch(n))
    for idx, (x, y) in enumerate(batches):
        (loss_fn(model(x), y) / accum).backward()
        if (idx + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()


def threshold_window_flushed_after_the_loop(model, loader, loss_fn, optimizer, optim_batch_size):
    steps_accum = 0
    for x, y in loader:
        loss = loss_fn(model(x), y) / optim_batch_size
        loss.backward()
        steps_accum += len(x)
        if steps_accum >= optim_batch_size:
            optimizer.step()
            optimizer.zero_grad()
            steps_accum = 0
    if steps_accum > 0:  # the last, partial window, weighted by its own size
        for p in model.parameters():
            if p.grad is not None:
                p.grad.mul_(optim_batch_size / steps_accum)
        optimizer.step()
        optimizer.zero_grad()


def threshold_on_a_flag_that_is_no_count(model, loader, loss_fn, optimizer, patience):
    """`bad_epochs >= patience` is no window: the step is under no threshold."""
    bad_epochs = 0
    for x, y in loader:
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()
        bad_epochs += 1
        if bad_epochs >= patience:
            bad_epochs = 0


def threshold_window_of_literal_counts(model, loss_fn, optimizer, make_batch):
    """12 micro-batches, one count each, a window at 4: the last micro-batch closes a window."""
    accum_n_steps = 0
    for step in range(12):
        x, y = make_batch(step)
        (loss_fn(model(x), y) / 4).backward()
        accum_n_steps += 1
        if accum_n_steps >= 4:
            optimizer.step()
            optimizer.zero_grad()
            accum_n_steps = 0


def whole_windows_counted_from_one_by_islice(model, loader, loss_fn, accum, optimizer, steps):
    for i, x in enumerate(itertools.islice(loader, accum * steps), start=1):
        (loss_fn(model(x)) / accum).backward()
        if i % accum == 0:
            optimizer.step()
            optimizer.zero_grad()


def amp_chosen_once_with_the_last_window(model, loader, loss_fn, optimizer, scaler, accum):
    """The same AMP branches, with the loader's last batch closing a window weighted by its own size."""
    use_amp = scaler is not None
    n = len(loader)
    for i, (x, y) in enumerate(loader):
        window = min(accum, n - i // accum * accum)  # the last window may be shorter
        loss = loss_fn(model(x), y) / window
        if use_amp:
            scaler.scale(loss).backward()
        else:
            loss.backward()
        if (i + 1) % accum == 0 or i + 1 == n:
            if use_amp:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            optimizer.zero_grad()


def last_batch_passed_to_a_helper_that_steps(model, loader, loss_fn, optimizer, accum):
    """The helper's `last` is bound to `i == len(loader) - 1` at each call: it varies, and closes the last window."""

    def train_step(x, y, i, last):
        (loss_fn(model(x), y) / accum).backward()
        if (i + 1) % accum == 0 or last:
            optimizer.step()
            optimizer.zero_grad()

    assert len(loader) % accum == 0  # whole windows: every loss is divided by accum
    for i, (x, y) in enumerate(loader):
        train_step(x, y, i, last=i == len(loader) - 1)


def exit_before_the_end_of_its_range(model, data_iter, loss_fn, optimizer, accum, total, n_windows):
    """The exit ends the loop at n_windows * accum micro-batches, a window boundary, before its range runs out."""
    for i in range(total):
        if i >= n_windows * accum:
            break
        x, y = next(data_iter)
        (loss_fn(model(x), y) / accum).backward()
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()


def literal_range_with_a_step_fits_the_window(model, data, target, loss_fn, optimizer):
    accum = 2
    for i in range(0, 40, 5):  # 8 batches: four whole windows
        (loss_fn(model(data[i : i + 5]), target[i : i + 5]) / accum).backward()
        if (i // 5 + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
