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


def closures_of_the_loop_body_called_from_both_branches(model, loader, loss_fn, optimizer, accum, has_no_sync):
    """timm's train.py: `_forward` / `_backward` are defined in the loop body and called from the
    `no_sync` branch and from the other; the loss is divided by the micro-step's number."""
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
            _loss /= batch_idx % accum_steps + 1  # expect: GG105
            return _loss, None

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


def ignite_factory_returning_its_update(model, optimizer, loss_fn, accum):
    """ignite's `supervised_training_step`: the factory returns `update(engine, batch)`, which the
    caller hands to an Engine (once per batch); the loss is divided by the micro-step's number."""
    from ignite.engine import Engine

    def update(engine: Engine, batch):
        if (engine.state.iteration - 1) % accum == 0:
            optimizer.zero_grad()
        x, y = batch
        loss = loss_fn(model(x), y)
        if accum > 1:
            loss = loss / ((engine.state.iteration - 1) % accum + 1)  # expect: GG105
        loss.backward()
        if engine.state.iteration % accum == 0:
            optimizer.step()
        return loss.item()

    return update


class TaskWithItsOwnTrainStep:
    """LAVIS's base task: the loop counts through a logger wrapping `range`, and the loss comes
    back, with its parts for logging, from the task's own `train_step`."""

    def train_step(self, model, samples):
        output = model(samples)
        return output["loss"], {k: v for k, v in output.items() if "loss" in k}

    def train_epoch(self, model, loader, optimizer, logger, iters, accum):
        for i in logger.log_every(range(iters), 50):
            loss, loss_dict = self.train_step(model=model, samples=next(loader))
            loss /= i % accum + 1  # expect: GG105
            loss.backward()
            if (i + 1) % accum == 0:
                optimizer.step()
                optimizer.zero_grad()
        assert iters % accum == 0


def enumerate_over_a_stepped_range(agent, data, optimizer, n, size, accum):
    """cleanrl's PPG auxiliary phase: `enumerate(range(0, n, size))` numbers the micro-batches."""
    for i, start in enumerate(range(0, n, size)):
        loss = agent.loss(data[start : start + size])
        loss = loss / (i % accum + 1)  # expect: GG105
        loss.backward()
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
    assert n // size % accum == 0
