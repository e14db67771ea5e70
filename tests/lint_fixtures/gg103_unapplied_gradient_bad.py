"""GG103: a conditional-step accumulation loop that drops the last partial window."""
import contextlib

import torch


def dropped_remainder(model, loader, loss_fn, accum):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for i, (x, y) in enumerate(loader):  # expect: GG103
        loss = loss_fn(model(x), y) / accum
        loss.backward()
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()


def dropped_remainder_continue_form(model, epochs, loader, loss_fn, accum, optimizer):
    for epoch in range(epochs):
        for step, batch in enumerate(loader, start=1):  # expect: GG103
            (loss_fn(model(batch)) / accum).backward()
            if step % accum != 0:
                continue
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        print("epoch", epoch)


def literal_data_leaves_a_remainder(model, loss_fn, optimizer):
    accum = 4
    sizes = [40, 12, 33, 7, 25, 25]
    for i, n in enumerate(sizes):  # expect: GG103
        (loss_fn(model(n)) / accum).backward()
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()


def window_test_through_a_name(model, loader, loss_fn, optimizer, accumulation_steps):
    # DDP no_sync accumulation: the window test is kept in a variable; the last partial window is dropped
    for i, (inputs, labels) in enumerate(loader):  # expect: GG103
        last_of_window = (i + 1) % accumulation_steps == 0
        ctx = contextlib.nullcontext() if last_of_window else model.no_sync()
        with ctx:
            (loss_fn(model(inputs), labels) / accumulation_steps).backward()
        if last_of_window:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)


def max_steps_exit_does_not_cover_the_end(model, loader, loss_fn, accum, optimizer, max_steps):
    """The early exit counts optimizer steps: when the data runs out first, its last partial window is dropped."""
    steps = 0
    for i, (x, y) in enumerate(loader):  # expect: GG103
        (loss_fn(model(x), y) / accum).backward()
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
            steps += 1
            if steps == max_steps:
                break


def constants_unpacked_leave_a_remainder(model, get_batch, loss_fn, optimizer):
    accumulation_steps, sparsity_coeff = 4, 0.1  # 10 micro-batches: the last two are never stepped
    for batch_idx in range(10):  # expect: GG103
        x = get_batch()
        loss = loss_fn(model(x)) + sparsity_coeff * model(x).abs().mean()
        (loss / accumulation_steps).backward()
        if (batch_idx + 1) % accumulation_steps == 0:
            optimizer.step()
            optimizer.zero_grad()


def constant_unpacked_from_a_call(model, get_batch, loss_fn, optimizer, load):
    accumulation_steps, lr = load()  # not known here: the window may not divide 10
    for batch_idx in range(10):  # expect: GG103
        (loss_fn(model(get_batch())) / accumulation_steps).backward()
        if (batch_idx + 1) % accumulation_steps == 0:
            optimizer.step()
            optimizer.zero_grad()


def counter_reset_every_epoch(model, loss_fn, optimizer, make_batch):
    accum = 4
    data = [make_batch() for _ in range(3)]
    for epoch in range(4):
        step = 0  # set afresh: 3 < 4 micro-batches per epoch, no window ever closes
        for x, y in data:  # expect: GG103
            (loss_fn(model(x), y) / accum).backward()
            step += 1
            if step % accum == 0:
                optimizer.step()
                optimizer.zero_grad()


def steps_at_the_start_of_a_window(model, loss_fn, optimizer, make_batch):
    accum = 4
    batches = [make_batch() for _ in range(8)]
    for batch_idx, (x, y) in enumerate(batches):  # expect: GG103
        (loss_fn(model(x), y) / accum).backward()
        if batch_idx % accum == 0:  # true at 0 and 4: the last three micro-batches stay in .grad
            optimizer.step()
            optimizer.zero_grad()


def list_appended_under_a_condition(model, loss_fn, optimizer, make_batch, keep):
    accum = 2
    batches = []
    for n in (10, 2, 3, 10, 1, 8):
        if keep(n):  # how many are kept is not known here
            batches.append(make_batch(n))
    for idx, (x, y) in enumerate(batches):  # expect: GG103
        (loss_fn(model(x), y) / accum).backward()
        if (idx + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()


def window_closes_on_a_threshold_of_examples(model, loader, loss_fn, optimizer, optim_batch_size):
    """The step waits for `optim_batch_size` accumulated examples; the epoch's last ones never get there."""
    steps_accum = 0
    for x, y in loader:  # expect: GG103
        loss = loss_fn(model(x), y) / optim_batch_size
        loss.backward()
        steps_accum += len(x)
        if steps_accum >= optim_batch_size:
            optimizer.step()
            optimizer.zero_grad()
            steps_accum = 0


def threshold_window_of_literal_counts_left_open(model, loss_fn, optimizer, make_batch):
    """10 micro-batches, a window at 4: the last two are never stepped."""
    accum_n_steps = 0
    for step in range(10):  # expect: GG103
        x, y = make_batch(step)
        (loss_fn(model(x), y) / 4).backward()
        accum_n_steps += 1
        if accum_n_steps >= 4:
            optimizer.step()
            optimizer.zero_grad()
            accum_n_steps = 0


def whole_count_but_window_test_at_its_start(model, data, loss_fn, accum, optimizer, steps):
    """`i % accum == 0` steps after the first pass, then every accum passes: the last
    accum - 1 of the steps * accum micro-batches are never stepped."""
    for i in range(steps * accum):  # expect: GG103
        (loss_fn(model(data[i])) / accum).backward()
        if i % accum == 0:
            optimizer.step()
            optimizer.zero_grad()


def count_of_other_factors(model, data, loss_fn, accum, optimizer, epochs, per_epoch):
    """`epochs * per_epoch` need not divide by `accum`."""
    for i in range(epochs * per_epoch):  # expect: GG103
        (loss_fn(model(data[i])) / accum).backward()
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()


def amp_chosen_once_for_backward_and_step(model, loader, loss_fn, optimizer, scaler, accum):
    """LAVIS's inner loop: AMP or not is decided once for the run, each branch back-propagates or
    steps its own way; either way the last partial window is never stepped."""
    use_amp = scaler is not None
    for i, (x, y) in enumerate(loader):  # expect: GG103
        loss = loss_fn(model(x), y) / accum
        if use_amp:
            scaler.scale(loss).backward()
        else:
            loss.backward()
        if (i + 1) % accum == 0:
            if use_amp:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            optimizer.zero_grad()


def no_sync_chosen_by_a_flag_and_the_window(model, loader, loss_fn, optimizer, accum, has_no_sync):
    """timm's shape: `no_sync` while the window is open, where the model has it; the window test
    alone decides the step, so the last partial window is dropped."""
    for batch_idx, (x, y) in enumerate(loader):  # expect: GG103
        need_update = (batch_idx + 1) % accum == 0
        if has_no_sync and not need_update:
            with model.no_sync():
                (loss_fn(model(x), y) / accum).backward()
        else:
            (loss_fn(model(x), y) / accum).backward()
        if need_update:
            optimizer.step()
            optimizer.zero_grad()


def exit_past_the_end_of_its_range(model, data_iter, loss_fn, optimizer, accum, iters_per_epoch, logger):
    """`if i >= n: break` in a loop over range(n) never ends it early: the loop runs n micro-batches."""
    for i in logger.log_every(range(iters_per_epoch), 50):  # expect: GG103
        if i >= iters_per_epoch:
            break
        x, y = next(data_iter)
        (loss_fn(model(x), y) / accum).backward()
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()


def literal_range_with_a_step_leaves_a_remainder(model, data, target, loss_fn, optimizer):
    accum = 2
    for i in range(0, 45, 5):  # expect: GG103
        (loss_fn(model(data[i : i + 5]), target[i : i + 5]) / accum).backward()  # 9 batches: the last is never stepped
        if (i // 5 + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
