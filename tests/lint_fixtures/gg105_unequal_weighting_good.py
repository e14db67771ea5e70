"""GG105: correct code of the same shapes (no finding expected)."""
import torch


def divide_by_window_size(model, get_batch, optimizer, gradient_accumulation_steps, max_iters):
    for it in range(max_iters):
        for micro_step in range(gradient_accumulation_steps):
            x, y = get_batch("train")
            logits, loss = model(x, y)
            loss = loss / gradient_accumulation_steps
            loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def running_average_for_logging(model, loader, loss_fn, optimizer):
    total = 0.0
    for i, (x, y) in enumerate(loader):
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.item()
        avg = total / (i + 1)
        print(avg)


def no_accumulation(model, loader, loss_fn, optimizer):
    for i, (x, y) in enumerate(loader):
        optimizer.zero_grad()
        loss = loss_fn(model(x), y) / (i + 1)  # a decaying weight, but one backward per step
        loss.backward()
        optimizer.step()


def divided_by_its_windows_size(model, loader, loss_fn, optimizer, accumulate):
    steps = len(loader)
    for step, (x, y) in enumerate(loader):
        # the size of the window `step` is in (the last may be shorter): the same for all its micro-batches
        (loss_fn(model(x), y) / min(accumulate, steps - step // accumulate * accumulate)).backward()
        if (step + 1) % accumulate == 0 or step + 1 == steps:
            optimizer.step()
            optimizer.zero_grad()


def closures_of_the_loop_body_called_from_both_branches(model, loader, loss_fn, optimizer, accum, has_no_sync):
    """timm's train.py: `_forward` / `_backward` are defined in the loop body and called from the
    `no_sync` branch and from the other; each micro-batch's loss is divided by its window's size."""
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
            if accum_steps > 1:
                _loss /= accum_steps
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
    caller hands to an Engine (once per batch); the window closes on `engine.state.iteration`."""
    from ignite.engine import Engine

    def update(engine: Engine, batch):
        if (engine.state.iteration - 1) % accum == 0:
            optimizer.zero_grad()
        x, y = batch
        loss = loss_fn(model(x), y)
        if accum > 1:
            loss = loss / accum
        loss.backward()
        if engine.state.iteration % accum == 0:
            optimizer.step()
        return loss.item()

    return update


class TaskWithItsOwnTrainStep:
    """LAVIS's base task: the loop counts through a logger wrapping `range`, and the loss, divided by the window, comes
    back, with its parts for logging, from the task's own `train_step`."""

    def train_step(self, model, samples):
        output = model(samples)
        return output["loss"], {k: v for k, v in output.items() if "loss" in k}

    def train_epoch(self, model, loader, optimizer, logger, iters, accum):
        for i in logger.log_every(range(iters), 50):
            loss, loss_dict = self.train_step(model=model, samples=next(loader))
            loss /= accum
            loss.backward()
            if (i + 1) % accum == 0:
                optimizer.step()
                optimizer.zero_grad()
        assert iters % accum == 0
