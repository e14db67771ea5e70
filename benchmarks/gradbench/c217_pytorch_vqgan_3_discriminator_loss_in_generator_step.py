"""pytorch-vqgan's VQ trainer: the generator (VQ autoencoder) loss is backpropagated with `retain_graph=True`, the discriminator's gradients are zeroed, and the discriminator loss, computed on the generator's reconstruction without `.detach()`, is backpropagated before both optimizers step, so the generator's step also applies the discriminator loss's gradient through D(G(z)).

source: Shubhamai/pytorch-vqgan#3 (https://github.com/Shubhamai/pytorch-vqgan/issues/3), "The subsequent optimizer steps in VQ Trainer are wrong :)": "Even though your zero the D gradients, when you do the backward, the gradients of G are affected by the gradients of D(G(z)). Since you perform two optimizer steps subsequently, G is updated by considering the additional gradient of D." A commenter (UkiTenzai) agrees and describes the fix (the discriminator's loss on `.detach()`ed samples); open, no maintainer answer: unconfirmed. The trainer was not read: the order follows the issue (vq loss backward with retain_graph, discriminator zero_grad, gan loss backward, then both steps); the VQ autoencoder is reduced to an MLP autoencoder with a reconstruction loss plus the adversarial term, the patch discriminator to an MLP. The twin feeds the reconstruction detached to the discriminator's loss
family: gan-stale
shape: Adam(lr=2e-4, betas=(0.5, 0.9)) for each network, adversarial weight 0.1; 6 iterations on batches of 8
numeric: every generator step also applies the gradient of the discriminator's loss on the reconstruction
watch: out: each network's gradient is applied once and cleared; which loss should reach which network is the program's intent
lint: out: the discriminator is cleared before its own loss's backward as usual; which loss reaches the generator needs the data flow
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
vqgan = torch.nn.Sequential(torch.nn.Linear(16, 6), torch.nn.Tanh(), torch.nn.Linear(6, 16))
discriminator = torch.nn.Sequential(torch.nn.Linear(16, 24), torch.nn.LeakyReLU(0.2), torch.nn.Linear(24, 1))
_gb.start(vqgan, discriminator)
opt_vq = torch.optim.Adam(vqgan.parameters(), lr=2e-4, betas=(0.5, 0.9))
opt_disc = torch.optim.Adam(discriminator.parameters(), lr=2e-4, betas=(0.5, 0.9))
data = [torch.randn(8, 16) for _ in range(6)]
for imgs in data:
    decoded_images = vqgan(imgs)
    disc_real = discriminator(imgs)
    disc_fake = discriminator(decoded_images)  # BUG
    # FIX: disc_fake = discriminator(decoded_images.detach())
    g_loss = -discriminator(decoded_images).mean()
    vq_loss = F.mse_loss(decoded_images, imgs) + 0.1 * g_loss
    d_loss_real = F.relu(1.0 - disc_real).mean()
    d_loss_fake = F.relu(1.0 + disc_fake).mean()
    gan_loss = 0.5 * (d_loss_real + d_loss_fake)
    opt_vq.zero_grad()
    vq_loss.backward(retain_graph=True)
    opt_disc.zero_grad()
    gan_loss.backward()
    opt_vq.step()
    opt_disc.step()
_gb.done(vqgan, discriminator)
