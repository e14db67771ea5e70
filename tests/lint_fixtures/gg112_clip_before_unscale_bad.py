"""GG112: gradients clipped (or their norm read) while a GradScaler's scale is still in them."""
import torch
from torch.nn.utils import clip_grad_norm_


def plain(model, loader, loss_fn, optimizer):
    scaler = torch.amp.GradScaler()
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # expect: GG112
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()


def window(model, loader, loss_fn, optimizer, accum):
    amp = torch.cuda.amp.GradScaler()  # any name: the call shape says what it is
    for i, (x, y) in enumerate(loader):
        scaled = amp.scale(loss_fn(model(x), y) / accum)
        scaled.backward()
        if (i + 1) % accum == 0:
            clip_grad_norm_(model.parameters(), max_norm=0.5)  # expect: GG112
            amp.step(optimizer)
            amp.update()
            optimizer.zero_grad()


def logged_norm(model, loader, loss_fn, optimizer, scaler):
    for x, y in loader:
        scaler.scale(loss_fn(model(x), y)).backward()
        grad_norm = sum(p.grad.norm() ** 2 for p in model.parameters()) ** 0.5  # expect: GG112
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
        print(float(grad_norm))


def _clip(net, limit):
    torch.nn.utils.clip_grad_value_(net.parameters(), limit)  # expect: GG112


def through_a_helper(model, loader, loss_fn, optimizer, scaler):
    for x, y in loader:
        optimizer.zero_grad()
        scaler.scale(loss_fn(model(x), y)).backward()
        _clip(model, 0.1)
        scaler.step(optimizer)
        scaler.update()


class Trainer:
    def __init__(self, model, optimizer):
        self.model, self.optimizer = model, optimizer
        self.grad_scaler = torch.amp.GradScaler()

    def backward(self, loss):
        self.grad_scaler.scale(loss).backward()

    def train(self, loader, loss_fn):
        for x, y in loader:
            self.backward(loss_fn(self.model(x), y))
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)  # expect: GG112
            self.grad_scaler.step(self.optimizer)
            self.grad_scaler.update()
            self.optimizer.zero_grad()


def unscaled_on_one_branch_only(model, loader, loss_fn, optimizer, scaler, log_every):
    for i, (x, y) in enumerate(loader):
        scaler.scale(loss_fn(model(x), y)).backward()
        if i % log_every == 0:
            scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # expect: GG112
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()


def two_scalers_one_clipped_early(G, D, loader, g_opt, d_opt):
    g_scaler, d_scaler = torch.amp.GradScaler(), torch.amp.GradScaler()
    for z, real in loader:
        g_opt.zero_grad()
        fake = G(z)
        g_scaler.scale(-D(fake).mean()).backward()
        torch.nn.utils.clip_grad_norm_(G.parameters(), 1.0)  # expect: GG112
        g_scaler.step(g_opt)
        g_scaler.update()
        d_opt.zero_grad()
        d_scaler.scale(D(fake.detach()).mean() - D(real).mean()).backward()
        d_scaler.unscale_(d_opt)
        torch.nn.utils.clip_grad_norm_(D.parameters(), 1.0)
        d_scaler.step(d_opt)
        d_scaler.update()
