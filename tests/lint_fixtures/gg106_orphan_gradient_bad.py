"""GG106: modules whose parameters reach the backward pass while no optimizer built here holds them."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class FeatureLoss(nn.Module):
    """Aligns the student's features to the teacher's with learnable 1x1 convolutions."""

    def __init__(self, channels_s, channels_t):
        super().__init__()
        self.align = nn.ModuleList(nn.Conv2d(cs, ct, 1) for cs, ct in zip(channels_s, channels_t))

    def forward(self, feats_s, feats_t):
        return sum(F.mse_loss(a(fs), ft) for a, fs, ft in zip(self.align, feats_s, feats_t))


def distill(student, teacher, loader):
    feature_loss = FeatureLoss([8, 12], [16, 24])
    optimizer = torch.optim.SGD(student.parameters(), lr=0.01, momentum=0.9)  # expect: GG106
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
    shared_optimizer = torch.optim.Adam(shared.encoder.parameters(), lr=1e-3)  # expect: GG106
    for x in loader:
        expert_optimizer.zero_grad()
        shared_optimizer.zero_grad()
        h, mu, logvar = shared(expert(x))
        kl = -0.5 * (1 + logvar - mu.pow(2) - logvar.exp()).sum(-1).mean()
        loss = F.mse_loss(h, x) + 0.1 * kl
        loss.backward()
        expert_optimizer.step()
        shared_optimizer.step()


def train_with_head(body, loader):
    head = nn.Linear(32, 10)  # added after the optimizer was written
    opt = torch.optim.AdamW(body.parameters(), lr=1e-3)  # expect: GG106
    for x, y in loader:
        logits = head(body(x))
        loss = F.cross_entropy(logits, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
