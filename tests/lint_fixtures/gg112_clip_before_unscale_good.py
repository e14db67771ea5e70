"""GG112 fixed: each clip after scaler.unscale_(optimizer), or with no scale in the gradients."""
import torch
from torch.nn.utils import clip_grad_norm_


def plain(model, loader, loss_fn, optimizer):
    scaler = torch.amp.GradScaler()
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()


def window(model, loader, loss_fn, optimizer, accum):
    amp = torch.cuda.amp.GradScaler()
    for i, (x, y) in enumerate(loader):
        scaled = amp.scale(loss_fn(model(x), y) / accum)
        scaled.backward()
        if (i + 1) % accum == 0:
            amp.unscale_(optimizer)
            clip_grad_norm_(model.parameters(), max_norm=0.5)
            amp.step(optimizer)
            amp.update()
            optimizer.zero_grad()


def logged_after_the_step(model, loader, loss_fn, optimizer, scaler):
    for x, y in loader:
        scaler.scale(loss_fn(model(x), y)).backward()
        scaler.step(optimizer)  # unscales, then steps
        scaler.update()
        grad_norm = sum(p.grad.norm() ** 2 for p in model.parameters()) ** 0.5
        optimizer.zero_grad()
        print(float(grad_norm))


def _unscale_and_clip(s, opt, net, limit):
    s.unscale_(opt)
    torch.nn.utils.clip_grad_value_(net.parameters(), limit)


def through_a_helper(model, loader, loss_fn, optimizer, scaler):
    for x, y in loader:
        optimizer.zero_grad()
        scaler.scale(loss_fn(model(x), y)).backward()
        _unscale_and_clip(scaler, optimizer, model, 0.1)
        scaler.step(optimizer)
        scaler.update()


def amp_optional(model, loader, loss_fn, optimizer, scaler, use_amp):
    for x, y in loader:
        loss = loss_fn(model(x), y)
        if use_amp:
            scaler.scale(loss).backward()
        else:
            loss.backward()
        if use_amp:
            scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if use_amp:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        optimizer.zero_grad()


def without_a_scaler(model, loader, loss_fn, optimizer, accelerator):
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        accelerator.backward(loss_fn(model(x), y))
        accelerator.clip_grad_norm_(model.parameters(), 1.0)  # Accelerate unscales its own scaler first


def a_scale_that_is_no_loss_scaler(model, loader, loss_fn, optimizer, resize):
    for x, y in loader:
        resize.scale(x).sum().backward()  # a module's own scale(): nothing steps, updates or unscales it
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()


def two_scalers(G, D, loader, g_opt, d_opt, accum):
    # one scaler per optimizer: the discriminator's scaled gradients of a micro-step are still in .grad
    # when the generator's window ends, but they sit in D's parameters; the clip after the generator's
    # unscale_ reads G's unscaled gradients
    g_scaler, d_scaler = torch.amp.GradScaler(), torch.amp.GradScaler()
    for i, (z, real) in enumerate(loader):
        if i % accum == 0:
            g_opt.zero_grad()
        fake = G(z)
        g_scaler.scale(-D(fake).mean() / accum).backward()
        if (i + 1) % accum == 0:
            g_scaler.unscale_(g_opt)
            torch.nn.utils.clip_grad_norm_(G.parameters(), 1.0)
            g_scaler.step(g_opt)
            g_scaler.update()
        if i % accum == 0:
            d_opt.zero_grad()
        d_scaler.scale((D(fake.detach()).mean() - D(real).mean()) / accum).backward()
        if (i + 1) % accum == 0:
            d_scaler.unscale_(d_opt)
            torch.nn.utils.clip_grad_norm_(D.parameters(), 1.0)
            d_scaler.step(d_opt)
            d_scaler.update()
