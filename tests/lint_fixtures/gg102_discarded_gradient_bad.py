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


def closures_of_the_loop_body_called_from_both_branches(model, loader, loss_fn, optimizer, accum, has_no_sync):
    """timm's train.py: `_forward` / `_backward` are defined in the loop body and called from the
    `no_sync` branch and from the other; the clearing in `_backward` runs on every micro-batch."""
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
            optimizer.zero_grad()  # expect: GG102
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


def clearing_in_the_plain_branch_of_a_scaler_flag(model, get_batch, optimizer, scaler, accum, iters):
    """nanochat's base_train.py: `if scaler is not None:` picks one backward for the whole run,
    and the plain branch clears on every micro-step before its backward."""
    for it in range(iters):
        for micro_step in range(accum):
            loss = model(get_batch()) / accum
            if scaler is not None:
                scaler.scale(loss).backward()
            else:
                model.zero_grad(set_to_none=True)  # expect: GG102
                loss.backward()
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()


class EngineBranchTrainer:
    """LLaMA-Factory's v1 trainer: a DeepSpeed branch that sets a flag on the engine per
    micro-batch, a plain branch that clears before each backward, a step skipped on a
    non-finite gradient norm."""

    def __init__(self, model, optimizer, engine=None):
        self.model, self.optimizer, self._engine = model, optimizer, engine

    def fit(self, batches, compute_loss):
        for micro_batches in batches:
            n = len(micro_batches)
            for i, micro_batch in enumerate(micro_batches):
                loss = compute_loss(micro_batch) / n
                if self._engine is not None:
                    self._engine.accelerator.sync_gradients = i == n - 1
                    self._engine.backward(loss)
                else:
                    self.optimizer.zero_grad()  # expect: GG102
                    loss.backward()
            if self._engine is None:
                grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
                if not torch.isfinite(grad_norm):
                    print("non-finite gradient norm", grad_norm)
                else:
                    self.optimizer.step()
                self.optimizer.zero_grad()


def ignite_update_calling_a_backward_pass_picked_for_the_run(model, optimizer, criterion, scaler, accum, hvd):
    """ignite's Pascal VOC reference: the update calls sibling closures, the backward pass one of
    two picked before the run; an added handler only logs. The AMP pass clears on every batch."""
    from ignite.engine import Engine, Events

    def forward_pass(batch):
        x, y = batch
        return criterion(model(x), y) / accum

    def amp_backward_pass(engine, loss):
        optimizer.zero_grad()  # expect: GG102
        scaler.scale(loss).backward()
        if engine.state.iteration % accum == 0:
            scaler.step(optimizer)
            scaler.update()

    def hvd_backward_pass(engine, loss):
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()

    if hvd:
        backward_pass = hvd_backward_pass
    else:
        backward_pass = amp_backward_pass

    def training_step(engine, batch):
        loss = forward_pass(batch)
        backward_pass(engine, loss)
        return loss.item()

    def log_confusion(engine):
        print(engine.state.metrics)

    trainer = Engine(training_step)
    trainer.add_event_handler(Events.COMPLETED, log_confusion)
    return trainer


def clearing_just_after_backward_in_micro_loop(model, get_batch, optimizer, accum, iters):
    """Every micro-batch's gradient is wiped as soon as it is made: the step applies nothing."""
    for it in range(iters):
        for micro in range(accum):
            loss = model(get_batch()) / accum
            loss.backward()
            optimizer.zero_grad(set_to_none=True)  # expect: GG102
        optimizer.step()


def clearing_just_after_backward_any_names(m, get_batch, o, n, iters):
    for t in range(iters):
        for j in range(n):
            (m(get_batch()) / n).backward()
            o.zero_grad()  # expect: GG102
        o.step()


class ClearingAfterBackwardInAMethod:
    def fit(self, chunks_of, loader):
        for batch in loader:
            chunks = chunks_of(batch)
            for chunk in chunks:
                loss = self.net(chunk) / len(chunks)
                loss.backward()
                self.solver.zero_grad()  # expect: GG102
            self.solver.step()


def module_cleared_inside_accelerate_accumulate(model, optimizer, loader, accelerator):
    """The prepared optimizer skips its step and its zero_grad until the window closes; the
    module's own zero_grad() does not: every micro-batch's gradient is wiped."""
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for batch in loader:
        with accelerator.accumulate(model):
            loss = model(batch).mean()
            accelerator.backward(loss)
            optimizer.step()
            model.zero_grad()  # expect: GG102
