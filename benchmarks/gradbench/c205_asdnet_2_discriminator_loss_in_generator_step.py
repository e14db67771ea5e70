"""asdnet GAN training (runGAN.py): in step 5.2 the discriminator's losses on real and on generated maps are backpropagated (lines 942 and 953) with the generated maps not detached, and the optimizers of the generator and the discriminator step later (lines 1156-1157) after the generator's own losses were backpropagated, so the generator's update also applies the discriminator losses' gradients and the discriminator's update also applies the generator's adversarial loss's.

source: ginobilinie/asdnet#2 (https://github.com/ginobilinie/asdnet/issues/2), "Some doubts about gradient when train GAN": "If we run loss.backward() in line 942 and line 953, and run optimizer.step() in line 1156 and line 1157, then gradients computed by line 942 and line 953 may be used to update G & D, while G should not be updated here in general." The author (ginobilinie): "Theoretically, you're right about this point. However, it doesnot matter much in practice." runGAN.py was not read: the order of backward passes and steps follows the issue's line references; the segmentation generator and the discriminator are reduced to MLPs on 32-feature inputs; the generator's own loss is a cross entropy plus the adversarial term. The twin detaches the generated maps for the discriminator's loss and steps and clears the discriminator before the generator's losses are backpropagated
family: gan-stale
shape: Adam(lr=2e-4, betas=(0.5, 0.999)) for each network; 6 iterations on batches of 8
numeric: every generator step also applies the gradient of the discriminator's fake-map loss, and every discriminator step the generator's adversarial loss
watch: out: each network's gradient is applied once and cleared; which loss should reach which network is the program's intent
lint: out: clearing before the backward passes and stepping after is the usual pattern; which loss reaches which network needs the data flow
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
netG = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.ReLU(), torch.nn.Linear(48, 3))
netD = torch.nn.Sequential(torch.nn.Linear(3, 24), torch.nn.LeakyReLU(0.2), torch.nn.Linear(24, 1))
_gb.start(netG, netD)
optimizer = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
optimizerD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
data = [(torch.randn(8, 32), torch.randint(0, 3, (8,))) for _ in range(6)]
for x, labels in data:
    optimizer.zero_grad()
    optimizerD.zero_grad()
    outputG = F.softmax(netG(x), dim=1)
    real = F.one_hot(labels, 3).to(outputG.dtype)
    # step 5.2: update D network
    lossD_real = F.binary_cross_entropy_with_logits(netD(real), torch.ones(8, 1, dtype=real.dtype))
    lossD_real.backward()
    lossD_fake = F.binary_cross_entropy_with_logits(netD(outputG), torch.zeros(8, 1, dtype=real.dtype))  # BUG
    # FIX: lossD_fake = F.binary_cross_entropy_with_logits(netD(outputG.detach()), torch.zeros(8, 1, dtype=real.dtype))
    lossD_fake.backward(retain_graph=True)
    # FIX: optimizerD.step()
    # FIX: optimizerD.zero_grad()
    # step 5.3: update G network
    lossG_adv = F.binary_cross_entropy_with_logits(netD(outputG), torch.ones(8, 1, dtype=real.dtype))
    lossG = F.nll_loss(torch.log(outputG + 1e-8), labels) + 0.5 * lossG_adv
    lossG.backward()
    optimizer.step()
    optimizerD.step()  # BUG
_gb.done(netG, netD)
