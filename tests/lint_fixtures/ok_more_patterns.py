"""Correct: more shapes of real training code (no finding expected)."""
from contextlib import nullcontext

import torch
import torch.optim as optim


def lbfgs_closure(seq, criterion, inp, target, steps):
    # time_sequence_prediction: LBFGS calls the closure, which clears and back-propagates
    optimizer = optim.LBFGS(seq.parameters(), lr=0.8)
    for i in range(steps):
        def closure():
            optimizer.zero_grad()
            loss = criterion(seq(inp), target)
            loss.backward()
            return loss

        optimizer.step(closure)


def finish_episode(policy, optimizer, returns, log_probs):
    # reinforcement_learning/reinforce.py: one update per episode, in a helper
    policy_loss = torch.cat([-lp * r for lp, r in zip(log_probs, returns)]).sum()
    optimizer.zero_grad()
    policy_loss.backward()
    optimizer.step()


def reinforce(env, policy, optimizer, select_action, episodes):
    for i_episode in range(episodes):
        state, ep_reward = env.reset(), 0
        for t in range(1, 10000):
            action = select_action(state)
            state, reward, done, _ = env.step(action)
            ep_reward += reward
            if done:
                break
        finish_episode(policy, optimizer, [], [])


def apex_amp(model, loader, loss_fn, optimizer, amp, accum):
    for i, (x, y) in enumerate(loader):
        # divided by the window: apex's scaling is taken off again, the loss it scales is what counts
        loss = loss_fn(model(x), y) / accum
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        if (i + 1) % accum == 0 or i + 1 == len(loader):
            optimizer.step()
            optimizer.zero_grad()


def ddp_no_sync(ddp_model, loader, loss_fn, optimizer, accum_steps):
    assert len(loader) % accum_steps == 0  # whole windows: every loss is divided by accum_steps
    for i, (x, y) in enumerate(loader):
        last = (i + 1) % accum_steps == 0 or i + 1 == len(loader)
        ctx = nullcontext() if last else ddp_model.no_sync()
        with ctx:
            loss = loss_fn(ddp_model(x), y) / accum_steps
            loss.backward()
        if last:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)


def timm_like(model, loader, loss_fn, optimizer, loss_scaler, accum_steps):
    for batch_idx, (x, y) in enumerate(loader):
        need_update = (batch_idx + 1) % accum_steps == 0 or batch_idx + 1 == len(loader)

        def _forward():
            loss = loss_fn(model(x), y)
            return loss / accum_steps

        def _backward(_loss):
            if loss_scaler is not None:
                loss_scaler(_loss, optimizer, need_update=need_update)
            else:
                _loss.backward()
                if need_update:
                    optimizer.step()

        loss = _forward()
        _backward(loss)
        if not need_update:
            continue
        optimizer.zero_grad()


def multi_optimizer(models, optimizers, loader, loss_fn):
    for x, y in loader:
        for opt in optimizers:
            opt.zero_grad()
        losses = [loss_fn(m(x), y) for m in models]
        torch.autograd.backward(losses)
        for opt in optimizers:
            opt.step()


def skip_oom(model, loader, loss_fn, optimizer):
    for x, y in loader:
        try:
            optimizer.zero_grad()
            loss_fn(model(x), y).backward()
            optimizer.step()
        except torch.cuda.OutOfMemoryError:
            optimizer.zero_grad()
            continue


def gradient_check_then_clear(model, loader, loss_fn, optimizer, probe):
    for x, y in loader:
        probe(model, x).backward()  # gradient norms for logging only
        norms = [p.grad.norm() for p in model.parameters()]
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
        print(norms)


def validation_total(model, val_loader, loss_fn):
    total = 0
    with torch.no_grad():
        for x, y in val_loader:
            total += loss_fn(model(x), y)
    return total


class LitLikeButPlain:
    def training_step(self, batch, batch_idx):
        # a method named like a Lightning hook: the framework runs the loop around it
        loss = self.model(batch)
        loss.backward()
        return loss
