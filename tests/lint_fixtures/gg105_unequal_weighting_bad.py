"""GG105 (static form): a loss divided by the running micro-step counter."""
import torch


def nanogpt_running_counter(model, get_batch, optimizer, gradient_accumulation_steps, max_iters):
    for it in range(max_iters):
        for micro_step in range(gradient_accumulation_steps):
            x, y = get_batch("train")
            logits, loss = model(x, y)
            loss = loss / (micro_step + 1)  # expect: GG105
            loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def modulo_counter(model, loader, loss_fn, optimizer, accum):
    for i, (x, y) in enumerate(loader):
        loss = loss_fn(model(x), y)
        (loss / (i % accum + 1)).backward()  # expect: GG105
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
    optimizer.step()


def in_place_division(model, loader, loss_fn, optimizer, accum):
    micro = 0
    for x, y in loader:
        micro += 1
        loss = loss_fn(model(x), y)
        loss /= micro  # expect: GG105
        loss.backward()
        if micro == accum:
            optimizer.step()
            optimizer.zero_grad()
            micro = 0
    optimizer.step()


def counter_in_a_state_dict(fabric, model, optimizer, loader, state, accum):
    """The iteration number lives in a checkpointable dict: still a running counter."""
    assert len(loader) % accum == 0
    for x, y in loader:
        state["iter_num"] += 1
        loss = model(x, y)
        fabric.backward(loss / (state["iter_num"] % accum + 1))  # expect: GG105
        if state["iter_num"] % accum == 0:
            optimizer.step()
            optimizer.zero_grad()


def position_in_the_window_written_out(model, loader, loss_fn, optimizer, accumulate):
    assert len(loader) % accumulate == 0
    for step, (x, y) in enumerate(loader):
        # step - step // K * K is step % K: the divisor grows within the window
        (loss_fn(model(x), y) / (step - step // accumulate * accumulate + 1)).backward()  # expect: GG105
        if (step + 1) % accumulate == 0:
            optimizer.step()
            optimizer.zero_grad()
