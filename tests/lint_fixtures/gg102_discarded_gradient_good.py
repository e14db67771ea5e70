"""GG102: correct code of the same shapes (no finding expected)."""
import torch


def skip_non_finite(model, loader, loss_fn, optimizer):
    for x, y in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        if not torch.isfinite(loss):
            continue
        optimizer.step()


def skip_by_clearing(model, loader, loss_fn, optimizer):
    for x, y in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        if not torch.isfinite(loss):
            optimizer.zero_grad()
        optimizer.step()


def gan_clears_the_other_optimizer(netD, netG, optD, optG, loader, loss_fn):
    for x in loader:
        optG.zero_grad()
        lossG = loss_fn(netD(netG(x)))
        lossG.backward()
        optD.zero_grad()  # D's .grad was filled by lossG: cleared on purpose
        optG.step()
        lossD = loss_fn(netD(x))
        lossD.backward()
        optD.step()


def accumulate_correctly(model, loader, loss_fn, accum, optimizer):
    assert len(loader) % accum == 0  # whole windows: every loss is divided by accum
    optimizer.zero_grad()
    for i, (x, y) in enumerate(loader):
        (loss_fn(model(x), y) / accum).backward()
        if (i + 1) % accum == 0 or i + 1 == len(loader):
            optimizer.step()
            optimizer.zero_grad()


def drop_one_frozen_gradient(model, loader, loss_fn, optimizer):
    for x, y in loader:
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        model.embedding.weight.grad = None  # keep the embedding fixed this step
        optimizer.step()


def freeze_encoder_for_this_step(model, loader, loss_fn, optimizer):
    for x, y in loader:
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        model.encoder.zero_grad()
        optimizer.step()


def clear_per_optimizer(models, optimizers, loader, loss_fn):
    for x, y in loader:
        for opt in optimizers:
            opt.zero_grad()
        sum(loss_fn(m(x), y) for m in models).backward()
        for opt in optimizers:
            opt.step()


def clearing_on_the_first_micro_step_only(model, get_batch, optimizer, accum, iters):
    for it in range(iters):
        for micro_step in range(accum):
            loss = model(get_batch()) / accum
            if micro_step == 0:
                optimizer.zero_grad()
                loss.backward()
            else:
                loss.backward()
        optimizer.step()


def clearing_on_a_first_pass_flag(model, micro_batches, optimizer, accum, iters):
    for it in range(iters):
        first = True
        for batch in micro_batches:
            loss = model(batch) / accum
            if first:
                optimizer.zero_grad()
                first = False
                loss.backward()
            else:
                loss.backward()
        optimizer.step()


def closures_of_the_loop_body_called_from_both_branches(model, loader, loss_fn, optimizer, accum, has_no_sync):
    """timm's train.py: `_forward` / `_backward` are defined in the loop body and called from the
    `no_sync` branch and from the other; the clearing runs once a window has stepped."""
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


def clearing_in_the_plain_branch_of_a_scaler_flag(model, get_batch, optimizer, scaler, accum, iters):
    """nanochat's base_train.py: `if scaler is not None:` picks one backward for the whole run,
    and the clearing follows the step."""
    for it in range(iters):
        for micro_step in range(accum):
            loss = model(get_batch()) / accum
            if scaler is not None:
                scaler.scale(loss).backward()
            else:
                loss.backward()
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        model.zero_grad(set_to_none=True)


class EngineBranchTrainer:
    """LLaMA-Factory's v1 trainer: a DeepSpeed branch that sets a flag on the engine per
    micro-batch, a plain branch that clears after its step, a step skipped on a
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
    two picked before the run; an added handler only logs. Each pass clears after its step."""
    from ignite.engine import Engine, Events

    def forward_pass(batch):
        x, y = batch
        return criterion(model(x), y) / accum

    def amp_backward_pass(engine, loss):
        scaler.scale(loss).backward()
        if engine.state.iteration % accum == 0:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()

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
