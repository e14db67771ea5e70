"""GANalyze train_pytorch.py: the training loop of the latent-space transformation calls `loss.backward()` and `optimizer.step()` without ever clearing the gradients, so each step applies the sum of all earlier batches' gradients.

source: LoreGoetschalckx/GANalyze#7 (https://github.com/LoreGoetschalckx/GANalyze/issues/7), "zero_grad is missing": "I wonder why you did not use optimizer.zero_grad() in the torch code? Is it a technique to get better result or is it just a mistake?" The issue is open without a reply. The code was not read: the loop follows the issue and the paper's method (a frozen generator and a frozen assessor; a learnable transformation moves the latent z by alpha times a learned direction; the loss is the MSE between the assessor's score of the transformed image and the original score plus alpha), with an MLP generator and a linear assessor. The twin clears at the top of each iteration
family: missing-clear
shape: transformation = OneDirection(dim_z) (a learnable direction); optimizer = Adam(transformation.parameters(), lr=2e-4); for each batch: zs, alphas sampled; feed = transformation.transform(zs, alphas); gan_images = generator(feed); out_scores = assessor(gan_images); target_scores = assessor(generator(zs)) + alphas; loss = criterion(out_scores, target_scores); loss.backward(); optimizer.step(). 8 batches
numeric: from the second step on, each step applies the running sum of every earlier batch's gradient
watch: GG101
lint: GG101
bug-step: 2
"""
import torch
import torch.nn as nn

import _gb


class OneDirection(nn.Module):
    def __init__(self, dim_z):
        super().__init__()
        self.w = nn.Parameter(torch.randn(1, dim_z) * 0.1)

    def transform(self, z, alpha):
        return z + alpha * self.w


_gb.setup()
dim_z = 8
generator = nn.Sequential(nn.Linear(dim_z, 16), nn.Tanh(), nn.Linear(16, 12))
assessor = nn.Linear(12, 1)
for p in list(generator.parameters()) + list(assessor.parameters()):
    p.requires_grad_(False)
transformation = OneDirection(dim_z)
_gb.start(transformation)
optimizer = torch.optim.Adam(transformation.parameters(), lr=2e-4)
criterion = nn.MSELoss()
batch_size = 4
for batch_start in range(0, 32, batch_size):
    # FIX: optimizer.zero_grad()
    zs = torch.randn(batch_size, dim_z)
    alphas = torch.rand(batch_size, 1) * 0.4 - 0.2
    feed = transformation.transform(zs, alphas)
    gan_images = generator(feed)
    out_scores = assessor(gan_images)
    target_scores = assessor(generator(zs)) + alphas
    loss = criterion(out_scores, target_scores)
    loss.backward()
    optimizer.step()
_gb.done(transformation)
