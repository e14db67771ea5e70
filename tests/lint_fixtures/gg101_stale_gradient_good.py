"""GG101: correct code of the same shapes (no finding expected)."""
import torch
from transformers import Trainer
import gradguard as gg


def zero_first(model, loader, loss_fn, optimizer):
    for x, y in loader:
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        optimizer.step()


def zero_after_step_in_helper(model, loader, loss_fn, optimizer):
    def unused():
        pass

    for x, y in loader:
        loss_fn(model(x), y).backward()
        _step_and_clear(optimizer)


def _step_and_clear(optimizer):
    optimizer.step()
    optimizer.zero_grad()


def grads_to_none(model, loader, loss_fn, optimizer):
    for x, y in loader:
        for p in model.parameters():
            p.grad = None
        loss_fn(model(x), y).backward()
        optimizer.step()


def grads_zeroed_when_present(model, loader, loss_fn, optimizer):
    for x, y in loader:
        for p in model.parameters():
            if p.grad is not None:
                p.grad.zero_()
        loss_fn(model(x), y).backward()
        optimizer.step()


def scheduler_is_not_an_optimizer(model, loader, loss_fn, scheduler):
    for x, y in loader:
        loss_fn(model(x), y).backward()
        scheduler.step()


def window_start_and_end(model, loader, loss_fn, optimizer, k):
    assert len(loader) % k == 0  # whole windows: every loss is divided by k
    for i, (x, y) in enumerate(loader):
        if i % k == 0:
            optimizer.zero_grad()
        (loss_fn(model(x), y) / k).backward()
        if (i + 1) % k == 0:
            optimizer.step()
    optimizer.step()  # the last partial window


def window_start_and_continue(model, loader, loss_fn, optimizer, k):
    assert len(loader) % k == 0  # whole windows: every loss is divided by k
    for i, (x, y) in enumerate(loader):
        if i % k == 0:
            optimizer.zero_grad()
        (loss_fn(model(x), y) / k).backward()
        if (i + 1) % k != 0:
            continue
        optimizer.step()
    optimizer.step()


def window_start_and_named_end(model, loader, loss_fn, optimizer, k):
    assert len(loader) % k == 0  # whole windows: every loss is divided by k
    for i, (x, y) in enumerate(loader):
        do_update = (i + 1) % k == 0 or i + 1 == len(loader)
        if i % k == 0:
            optimizer.zero_grad()
        (loss_fn(model(x), y) / k).backward()
        if do_update:
            optimizer.step()


def suppressed(model, loader, loss_fn, optimizer):
    for x, y in loader:
        loss_fn(model(x), y).backward()
        optimizer.step()  # gradguard: ignore[GG101]


def suppressed_bare(model, loader, loss_fn, optimizer):
    for x, y in loader:
        loss_fn(model(x), y).backward()
        optimizer.step()  # gradguard: ignore




def fresh_module_and_optimizer_per_case(cases, make_input):
    """A test that builds a new module and a new SGD for every case: each step reads only its own backward."""
    for case in cases:
        layer = torch.nn.Linear(**case)
        trainable = {n: p for n, p in layer.named_parameters() if p.requires_grad}
        loss = layer(make_input(case)).sum()
        loss.backward()
        sgd = torch.optim.SGD(trainable.values(), 1)
        sgd.step()


class RolloutTrainer(Trainer):
    """Derives from the HF Trainer but runs its own loop in train(), clearing after each step."""

    def train(self):
        for epoch in range(self.args.num_ppo_epochs):
            for mb in self.minibatches():
                with self.accelerator.accumulate(self.model):
                    loss = self.policy_loss(mb)
                    self.accelerator.backward(loss)
                    self.optimizer.step()
                    self.optimizer.zero_grad()


def _step_then_maybe_clear(optimizer, zero_grad=False):
    optimizer.step()
    if zero_grad:
        optimizer.zero_grad()


def clearing_flag_passed_true(model, loader, loss_fn, optimizer):
    for x, y in loader:
        loss_fn(model(x), y).backward()
        _step_then_maybe_clear(optimizer, zero_grad=True)  # the helper's `if zero_grad:` always clears here


def _step_unless_kept(optimizer, keep_grads=False):
    optimizer.step()
    if not keep_grads:
        optimizer.zero_grad()


def clearing_by_default(model, loader, loss_fn, optimizer):
    for x, y in loader:
        loss_fn(model(x), y).backward()
        _step_unless_kept(optimizer)


def amp_chosen_once_clears_in_each_branch(model, loader, loss_fn, optimizer, scaler, accum):
    """AMP is decided once for the run, and each branch clears after its own step."""
    use_amp = scaler is not None
    assert len(loader) % accum == 0
    for i, (x, y) in enumerate(loader):
        loss = loss_fn(model(x), y) / accum
        if use_amp:
            scaler.scale(loss).backward()
        else:
            loss.backward()
        if (i + 1) % accum == 0:
            if use_amp:
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()
            else:
                optimizer.step()
                optimizer.zero_grad()
