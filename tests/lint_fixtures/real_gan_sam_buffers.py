"""GANs, two optimizers, SAM, Opacus-style buffers, distributed autograd, EMA, evaluation loops."""
import torch
import torch.distributed.autograd as dist_autograd
import torch.nn as nn

criterion = nn.CrossEntropyLoss(reduction="sum")


def two_optimizers_one_never_cleared(actor, critic, loader):
    actor_opt = torch.optim.Adam(actor.parameters())
    critic_opt = torch.optim.Adam(critic.parameters())
    for obs, ret in loader:
        critic_opt.zero_grad()
        value_loss = (critic(obs) - ret).pow(2).mean()
        value_loss.backward()
        critic_opt.step()
        policy_loss = -critic(actor(obs)).mean()
        policy_loss.backward()
        actor_opt.step()  # expect: GG101


def ema_without_clearing(model, ema_model, loader, loss_fn, optimizer, decay):
    for x, y in loader:
        loss_fn(model(x), y).backward()
        optimizer.step()  # expect: GG101
        with torch.no_grad():
            for ema_p, p in zip(ema_model.parameters(), model.parameters()):
                ema_p.mul_(decay).add_(p.detach(), alpha=1 - decay)


def eval_without_no_grad(model, loader, loss_fn):
    model.eval()
    total_loss = 0
    for x, y in loader:
        output = model(x)
        loss = loss_fn(output, y)
        total_loss += loss  # expect: GG201
    return total_loss / len(loader)


def train_sums_tensor_after_backward(model, loader, loss_fn, optimizer):
    running = 0
    for x, y in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        running += loss  # expect: GG201
    return running


# --- correct: no finding -------------------------------------------------------
def dcgan(netD, netG, dataloader, criterion_bce, nz):
    optimizerD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
    optimizerG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
    for i, data in enumerate(dataloader):
        netD.zero_grad()
        real = data[0]
        label = torch.full((real.size(0),), 1.0)
        errD_real = criterion_bce(netD(real).view(-1), label)
        errD_real.backward()
        noise = torch.randn(real.size(0), nz, 1, 1)
        fake = netG(noise)
        label.fill_(0.0)
        errD_fake = criterion_bce(netD(fake.detach()).view(-1), label)
        errD_fake.backward()
        optimizerD.step()
        netG.zero_grad()
        label.fill_(1.0)
        errG = criterion_bce(netD(fake).view(-1), label)
        errG.backward()
        optimizerG.step()


def sam(model, loader, loss_fn, base_optimizer, rho):
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        grad_norm = torch.norm(torch.stack([p.grad.norm(p=2) for p in model.parameters() if p.grad is not None]), p=2)
        eps = []
        with torch.no_grad():
            for p in model.parameters():
                e_w = p.grad * rho / (grad_norm + 1e-12)
                p.add_(e_w)
                eps.append(e_w)
        base_optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        with torch.no_grad():
            for p, e_w in zip(model.parameters(), eps):
                p.sub_(e_w)
        base_optimizer.step()
        base_optimizer.zero_grad()


def opacus_virtual_step(model, loader, loss_fn, optimizer, accum):
    params = [p for p in model.parameters() if p.requires_grad]
    for i, (x, y) in enumerate(loader):
        loss = loss_fn(model(x), y)
        loss.backward()
        for p in params:
            if not hasattr(p, "summed_grad"):
                p.summed_grad = torch.zeros_like(p)
            p.summed_grad += p.grad
            p.grad = None
        if (i + 1) % accum == 0:
            for p in params:
                p.grad = p.summed_grad / accum
                p.summed_grad = torch.zeros_like(p)
            optimizer.step()
            optimizer.zero_grad()
    optimizer.step()


def sum_reduction_built_elsewhere(model, loader, optimizer, accum):
    for i, (x, y) in enumerate(loader):
        loss = criterion(model(x), y)
        loss.backward()
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
    optimizer.step()


def distributed_autograd(model, loader, dist_optim, loss_fn):
    for x, y in loader:
        with dist_autograd.context() as context_id:
            loss = loss_fn(model(x), y)
            dist_autograd.backward(context_id, [loss])
            dist_optim.step(context_id)


def ema(model, ema_model, loader, loss_fn, optimizer, decay):
    for x, y in loader:
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        optimizer.step()
        with torch.no_grad():
            for ema_p, p in zip(ema_model.parameters(), model.parameters()):
                ema_p.mul_(decay).add_(p.detach(), alpha=1 - decay)


def evaluate(model, loader, loss_fn):
    model.eval()
    total_loss = 0.0
    with torch.no_grad():
        for x, y in loader:
            loss = loss_fn(model(x), y)
            total_loss += loss
    return total_loss / len(loader)


@torch.no_grad()
def evaluate_decorated(model, loader, loss_fn):
    total_loss = 0
    for x, y in loader:
        loss = loss_fn(model(x), y)
        total_loss += loss
    return total_loss


def validate_inner(model, loader, loss_fn):
    total_loss = 0
    for x, y in loader:
        loss = loss_fn(model(x), y)
        total_loss += loss
    return total_loss


def run_validation(model, loader, loss_fn):
    with torch.no_grad():
        return validate_inner(model, loader, loss_fn)


def eval_with_item(model, loader, loss_fn):
    total_loss = 0.0
    for x, y in loader:
        loss = loss_fn(model(x), y)
        total_loss += loss.item()
    return total_loss


def grad_added_in_place_after_zeroing(model, loader, loss_fn, extra_grads):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for x, y in loader:
        optimizer.zero_grad(set_to_none=False)
        loss_fn(model(x), y).backward()
        for p, g in zip(model.parameters(), extra_grads):
            p.grad += g
        optimizer.step()


def equal_tests_in_two_ifs(model, loader, loss_fn, optimizer, accum):
    step = 0
    while True:
        try:
            x, y = next(loader)
        except StopIteration:
            break
        step += 1
        with torch.autocast("cpu"):
            loss = loss_fn(model(x), y) / accum
        loss.backward()
        if step % accum == 0:
            optimizer.step()
        if step % accum == 0:
            optimizer.zero_grad()
