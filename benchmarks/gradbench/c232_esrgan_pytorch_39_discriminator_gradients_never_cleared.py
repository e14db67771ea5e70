"""ESRGAN-PyTorch's `train_gan.py`: the two lines that should clear the generator's and then the discriminator's gradients both name the generator's optimizer, so the discriminator's gradients are never cleared: each discriminator step applies the sum of its loss gradients from every iteration so far (the generator step turns the discriminator's requires_grad off, so no generator loss reaches it).

source: Lornatang/ESRGAN-PyTorch#39 (https://github.com/Lornatang/ESRGAN-PyTorch/issues/39), "a small bug in train_gan.py ?": "It seems that line 147 and 148 in train_gan.py are all \"g_optimizer\", I wonder the second should be \"d_optimizer\"?" The maintainer (Lornatang): "Yeah! You are right. Thank you for pointing out the mistake." train_gan.py was read at a later commit (it clears with `d_model.zero_grad(set_to_none=True)` before the discriminator's losses and turns the discriminator's requires_grad off during the generator step); the buggy lines are written as the issue describes; the RRDB generator and VGG discriminator are reduced to MLPs on 8-dimensional samples, the relativistic losses are kept, AMP is left out. The twin clears the discriminator's optimizer, the maintainer's fix
family: gan-stale
shape: Adam(lr=1e-4) for both; 4 iterations on batches of 16
numeric: the discriminator's k-th step applies the sum of its first k losses' gradients
watch: GG101
lint: GG101
bug-step: 2
"""
import torch

import _gb

_gb.setup()
data = [(torch.randn(16, 4), torch.randn(16, 8)) for _ in range(4)]
g_model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))
d_model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LeakyReLU(0.2), torch.nn.Linear(16, 1))
_gb.start(g_model, d_model)
g_optimizer = torch.optim.Adam(g_model.parameters(), lr=1e-4)
d_optimizer = torch.optim.Adam(d_model.parameters(), lr=1e-4)
bce = torch.nn.BCEWithLogitsLoss()
real_label, fake_label = torch.ones(16, 1), torch.zeros(16, 1)
for lr_img, gt in data:
    for p in d_model.parameters():
        p.requires_grad = False
    g_optimizer.zero_grad()
    sr = g_model(lr_img)
    gt_output, sr_output = d_model(gt), d_model(sr)
    adversarial_loss = (bce(gt_output - sr_output.mean(), fake_label) + bce(sr_output - gt_output.mean(), real_label)) / 2
    g_loss = torch.nn.functional.l1_loss(sr, gt) + 5e-3 * adversarial_loss
    g_loss.backward()
    g_optimizer.step()

    for p in d_model.parameters():
        p.requires_grad = True
    g_optimizer.zero_grad()  # BUG
    # FIX: d_optimizer.zero_grad()
    gt_output = d_model(gt)
    sr_output = d_model(sr.detach())
    d_loss_gt = bce(gt_output - sr_output.mean(), real_label) * 0.5
    d_loss_gt.backward(retain_graph=True)
    sr_output = d_model(sr.detach())
    d_loss_sr = bce(sr_output - gt_output.mean(), fake_label) * 0.5
    d_loss_sr.backward()
    d_optimizer.step()
_gb.done(g_model, d_model)
