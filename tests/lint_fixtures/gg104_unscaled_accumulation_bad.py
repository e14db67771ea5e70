"""GG104: an accumulation loop whose mean loss reaches backward undivided."""
import torch
import torch.nn.functional as F


def not_divided(model, loader, accum, optimizer):
    for i, (x, y) in enumerate(loader):
        loss = F.cross_entropy(model(x), y)
        loss.backward()  # expect: GG104
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
    optimizer.step()


def not_divided_with_scaler(model, loader, criterion, accum, optimizer, scaler):
    for i, (x, y) in enumerate(loader):
        with torch.autocast("cuda"):
            outputs = model(x)
            loss = criterion(outputs, y)
        scaler.scale(loss).backward()  # expect: GG104
        if (i + 1) % accum == 0:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
    scaler.step(optimizer)


def nanogpt_without_division(model, get_batch, gradient_accumulation_steps, optimizer, max_iters):
    for it in range(max_iters):
        for micro_step in range(gradient_accumulation_steps):
            X, Y = get_batch("train")
            logits, loss = model(X, Y)
            loss.backward()  # expect: GG104
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def flag_toggled_window_not_divided(model, loader, loss_fn, optimizer, use_accum, accum_steps):
    for i, (x, y) in enumerate(loader):
        if use_accum:
            loss = loss_fn(model(x), y)
            loss.backward()  # expect: GG104
            if (i + 1) % accum_steps == 0:
                optimizer.step()
                optimizer.zero_grad()
        else:
            optimizer.zero_grad()
            loss_fn(model(x), y).backward()
            optimizer.step()
    optimizer.step()


def loss_rebound_for_logging(fabric, model, optimizer, loader, meter, accum):
    """`loss` is rebound to a number after the backward pass, for the progress line: the
    backward still reads the undivided mean loss of this iteration."""
    assert len(loader) % accum == 0
    for i, (x, y) in enumerate(loader):
        loss = cross_entropy(model(x), y)
        fabric.backward(loss)  # expect: GG104
        meter.update(loss.detach())
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
        loss = meter.compute().item()



class DiffusionTrainer:
    def train(self):
        """The model's forward returns its mean loss (a diffusion model's noise-prediction loss)."""
        while self.step < self.train_num_steps:
            for _ in range(self.gradient_accumulate_every):
                data = next(self.dl)
                loss = self.model(data)
                self.accelerator.backward(loss)  # expect: GG104
            self.opt.step()
            self.opt.zero_grad()
            self.step += 1


DISTILL_ACCUM, DISTILL_ALPHA, SPARSITY = 8, 0.5, 0.1


def distillation_weighted_sum_not_divided(student, teacher, loader, optimizer, temperature):
    """`alpha * kd + (1 - alpha) * ce`: a weighted sum of means is a mean, still undivided."""
    assert len(loader) % DISTILL_ACCUM == 0  # whole windows
    for i, (x, y) in enumerate(loader):
        s_logits, t_logits = student(x), teacher(x)
        kd = F.kl_div(F.log_softmax(s_logits, -1), F.softmax(t_logits, -1), reduction="batchmean")
        loss = DISTILL_ALPHA * kd + (1 - DISTILL_ALPHA) * F.cross_entropy(s_logits, y)
        loss.backward()  # expect: GG104
        if (i + 1) % DISTILL_ACCUM == 0:
            optimizer.step()
            optimizer.zero_grad()


def sum_of_two_means_not_divided(encoder, decoder, loader, optimizer):
    assert len(loader) % DISTILL_ACCUM == 0  # whole windows
    for i, acts in enumerate(loader):
        c = torch.relu(encoder(acts))
        loss = ((decoder(c) - acts) ** 2).mean() + SPARSITY * c.abs().mean()
        loss.backward()  # expect: GG104
        if (i + 1) % DISTILL_ACCUM == 0:
            optimizer.step()
            optimizer.zero_grad()


def one_term_left_undivided(model, loader, optimizer, accum, beta):
    """`ce` reaches backward as a plain mean; only the regulariser is scaled."""
    assert len(loader) % accum == 0  # whole windows
    for i, (x, y) in enumerate(loader):
        out = model(x)
        loss = F.cross_entropy(out, y) + beta * out.pow(2).mean() / accum
        loss.backward()  # expect: GG104
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()


def closures_of_the_loop_body_called_from_both_branches(model, loader, loss_fn, optimizer, accum, has_no_sync):
    """timm's train.py: `_forward` / `_backward` are defined in the loop body and called from the
    `no_sync` branch and from the other; nothing divides the loss by the window."""
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
            return _loss, None

        def _backward(_loss):
            _loss.backward()  # expect: GG104
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
    caller hands to an Engine (once per batch); nothing divides the loss by the window."""
    from ignite.engine import Engine

    def update(engine: Engine, batch):
        if (engine.state.iteration - 1) % accum == 0:
            optimizer.zero_grad()
        x, y = batch
        loss = loss_fn(model(x), y)
        loss.backward()  # expect: GG104
        if engine.state.iteration % accum == 0:
            optimizer.step()
        return loss.item()

    return update
