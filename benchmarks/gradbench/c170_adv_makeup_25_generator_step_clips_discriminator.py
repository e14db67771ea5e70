"""Adv-Makeup model.py (generator update): after the generator's loss is backpropagated, the code clips the discriminator's gradients (`clip_grad_norm_(self.dis.parameters(), 5)`) where the generator's are meant, then steps the generator's optimizer, so every generator step applies its unclipped gradient (and the clip edits the discriminator's gradient, which its next update clears).

source: TencentYoutuResearch/Adv-Makeup#25 (https://github.com/TencentYoutuResearch/Adv-Makeup/issues/25), "Regarding some details of updating the generator and discriminator" (model.py#L346-L348 at f238d37): "Why do you clip the grad of the discriminator when updating the generator (maybe instead of clipping the grad of generator)? I fail to find the corresponding explanation in your paper. I also notice that when updating the discriminator, fake images are not detached from the generator network". The issue is open with no reply. Only the quoted lines were read: the discriminator update (zero_grad, loss on real and non-detached fake, backward, step) and the generator update (zero_grad, adversarial + makeup loss, backward, clip of self.dis's parameters at 5, step); the makeup generator is reduced to an MLP on face features, the discriminator to an MLP. The twin clips the generator's parameters
family: clip-misplaced
shape: Adam(lr=2e-3) for each; clip 5; 6 iterations of D update then G update; features scaled so the generator's gradient norm exceeds 5
numeric: every generator step uses the unclipped gradient
watch: GG116
lint: GG116
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
gen = torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
dis = torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.LeakyReLU(0.2), torch.nn.Linear(32, 1))
_gb.start(gen, dis)
gen_opt = torch.optim.Adam(gen.parameters(), lr=2e-3)
dis_opt = torch.optim.Adam(dis.parameters(), lr=2e-3)
for it in range(6):
    before, after = 20 * torch.randn(16, 10), 20 * torch.randn(16, 10)
    fake = gen(before)
    dis_opt.zero_grad()
    d_loss = (F.binary_cross_entropy_with_logits(dis(after), torch.ones(16, 1))
              + F.binary_cross_entropy_with_logits(dis(fake), torch.zeros(16, 1)))
    d_loss.backward()
    dis_opt.step()
    gen_opt.zero_grad()
    fake = gen(before)
    g_loss = F.binary_cross_entropy_with_logits(dis(fake), torch.ones(16, 1)) + F.mse_loss(fake, after)
    g_loss.backward()
    torch.nn.utils.clip_grad_norm_(dis.parameters(), 5)  # BUG
    # FIX: torch.nn.utils.clip_grad_norm_(gen.parameters(), 5)
    gen_opt.step()
_gb.done(gen, dis)
