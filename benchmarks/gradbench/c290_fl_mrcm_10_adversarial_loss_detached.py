"""FL-MRCM's federated MRI reconstruction: the generator-side adversarial (domain) loss `loss_adv_g` is turned into a plain number before it is added to the reconstruction loss, so it contributes no gradient and the cross-site feature alignment has no effect on the reconstruction network.

source: guopengf/FL-MRCM#10 (https://github.com/guopengf/FL-MRCM/issues/10), the report that loss_adv_g is detached so the adversarial alignment does not train the network; the maintainer confirmed and fixed it. One client's local step is written from the report: a reconstruction network (encoder-decoder MLP) with an L1 loss, a domain discriminator on the encoder features trained on its own loss, and the generator-side loss that asks the features to fool it, weighted by 0.01 (the case's choice); the federated averaging around it is left out. The twin keeps loss_adv_g as a tensor
family: gan-detached
shape: Adam(lr=1e-3) for the network, Adam(lr=1e-3) for the discriminator, 5 local iterations of 8 images of 32 pixels
numeric: the bug's network updates lack the adversarial term's gradient
watch: out: which losses should reach the encoder is the program's intent; every gradient present is applied once and cleared
lint: GG203
scope-history: lint declared out when the case was written ("converting a loss to a number inside a loss expression is the loss's definition, not the gradient buffer's handling"); re-declared GG203 after the rule was written from this family's cases (in-sample from then on)
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
encoder = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.ReLU())
decoder = torch.nn.Linear(16, 32)
discriminator = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
_gb.start(encoder, decoder)
optimizer = torch.optim.Adam(list(encoder.parameters()) + list(decoder.parameters()), lr=1e-3)
optimizer_d = torch.optim.Adam(discriminator.parameters(), lr=1e-3)
target_features = torch.randn(64, 16).relu()
for it in range(5):
    under, full = torch.randn(8, 32), torch.randn(8, 32)
    feat = encoder(under)
    recon = decoder(feat)
    d_loss = F.binary_cross_entropy_with_logits(discriminator(feat.detach()), torch.zeros(8, 1)) + \
        F.binary_cross_entropy_with_logits(discriminator(target_features[it * 8:(it + 1) * 8]), torch.ones(8, 1))
    optimizer_d.zero_grad()
    d_loss.backward()
    optimizer_d.step()
    loss_adv_g = F.binary_cross_entropy_with_logits(discriminator(feat), torch.ones(8, 1))
    loss_adv_g = loss_adv_g.item()  # BUG
    loss = F.l1_loss(recon, full) + 0.01 * loss_adv_g
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
_gb.done(encoder, decoder)
