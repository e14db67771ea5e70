"""GG106 fixed, and the shapes that must stay silent: parameters handed on in ways the linter reads or cannot
follow, parts frozen by their class, modules run without gradient."""
import itertools

import torch
import torch.nn as nn
import torch.nn.functional as F


class FeatureLoss(nn.Module):
    def __init__(self, channels_s, channels_t):
        super().__init__()
        self.align = nn.ModuleList(nn.Conv2d(cs, ct, 1) for cs, ct in zip(channels_s, channels_t))

    def forward(self, feats_s, feats_t):
        return sum(F.mse_loss(a(fs), ft) for a, fs, ft in zip(self.align, feats_s, feats_t))


def distill(student, teacher, loader):
    feature_loss = FeatureLoss([8, 12], [16, 24])
    params = list(student.parameters())
    params += list(feature_loss.parameters())
    optimizer = torch.optim.SGD(params, lr=0.01, momentum=0.9)
    for img, labels in loader:
        with torch.no_grad():
            _, feats_t = teacher(img)
        logits, feats_s = student(img)
        loss = F.cross_entropy(logits, labels) + feature_loss(feats_s, feats_t)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


class SharedVAE(nn.Module):
    def __init__(self, d=16, z=4):
        super().__init__()
        self.encoder = nn.Linear(d, 2 * z)
        self.decoder = nn.Linear(z, d)

    def forward(self, h):
        mu, logvar = self.encoder(h).chunk(2, -1)
        return self.decoder(mu + torch.randn_like(mu) * (0.5 * logvar).exp()), mu, logvar


def train_shared(expert, loader):
    shared = SharedVAE()
    expert_optimizer = torch.optim.Adam(expert.parameters(), lr=1e-3)
    shared_optimizer = torch.optim.Adam(itertools.chain(shared.encoder.parameters(), shared.decoder.parameters()))
    for x in loader:
        expert_optimizer.zero_grad()
        shared_optimizer.zero_grad()
        h, mu, logvar = shared(expert(x))
        loss = F.mse_loss(h, x) + 0.1 * (mu.pow(2) + logvar.exp() - logvar).mean()
        loss.backward()
        expert_optimizer.step()
        shared_optimizer.step()


class FrozenBase(nn.Module):
    """The class freezes its pretrained part itself."""

    def __init__(self):
        super().__init__()
        self.base = nn.Linear(16, 16)
        self.base.requires_grad_(False)
        self.adapter = nn.Linear(16, 4)

    def forward(self, x):
        return self.adapter(self.base(x))


class FrozenByLoop(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Linear(16, 16)
        for p in self.backbone.parameters():
            p.requires_grad = False
        self.classifier = nn.Linear(16, 4)

    def forward(self, x):
        return self.classifier(self.backbone(x))


def train_frozen(loader):
    frozen_base = FrozenBase()
    frozen_loop = FrozenByLoop()
    opt_a = torch.optim.SGD(frozen_base.adapter.parameters(), lr=0.1)
    opt_b = torch.optim.SGD(frozen_loop.classifier.parameters(), lr=0.1)
    for x, y in loader:
        loss = F.cross_entropy(frozen_base(x), y) + F.cross_entropy(frozen_loop(x), y)
        loss.backward()
        opt_a.step()
        opt_b.step()
        opt_a.zero_grad()
        opt_b.zero_grad()


def train_with_helper(body, loader, build_optimizer):
    head1 = nn.Linear(32, 10)
    opt1 = build_optimizer(body, head1)  # handed through a helper
    for x, y in loader:
        loss = F.cross_entropy(head1(body(x)), y)
        loss.backward()
        opt1.step()
        opt1.zero_grad()


class Wrapper(nn.Module):
    def __init__(self, core):
        super().__init__()
        self.core = core

    def forward(self, x):
        return self.core(x)


def train_wrapped(loader):
    core = nn.Linear(8, 2)
    wrapped = Wrapper(core)  # the containing module's parameters() holds it
    opt2 = torch.optim.SGD(wrapped.parameters(), lr=0.1)
    for x, y in loader:
        loss = F.cross_entropy(core(x), y)
        loss.backward()
        opt2.step()
        opt2.zero_grad()


def train_filtered_groups(body, loader):
    head3 = nn.Linear(32, 10)
    head4 = nn.Linear(32, 10)
    opt3 = torch.optim.AdamW([
        {"params": body.parameters()},
        {"params": filter(lambda p: p.requires_grad, head3.parameters()), "lr": 1e-4},
    ])
    opt3.add_param_group({"params": head4.parameters()})
    for x, y in loader:
        h = body(x)
        loss = F.cross_entropy(head3(h), y) + F.cross_entropy(head4(h), y)
        loss.backward()
        opt3.step()
        opt3.zero_grad()


def train_with_fixed_critic(policy, loader):
    critic = nn.Linear(4, 1)
    reference = nn.Linear(4, 1)
    reference.requires_grad_(False)
    opt4 = torch.optim.Adam(policy.parameters(), lr=1e-3)
    for obs in loader:
        action = policy(obs)
        with torch.no_grad():
            value = critic(obs)
        loss = -(value * action).mean() + critic(obs).detach().mean() + reference(action).mean()
        loss.backward()
        opt4.step()
        opt4.zero_grad()
