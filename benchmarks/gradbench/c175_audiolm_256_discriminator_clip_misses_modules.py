"""audiolm-pytorch SoundStreamTrainer: the discriminators' gradient clip `self.accelerator.clip_grad_norm_(self.soundstream.stft_discriminator.parameters(), self.discr_max_grad_norm)` covers only the STFT discriminator, so the multi-scale discriminators (`self.soundstream.discriminators`), stepped by the same discriminator optimizer, apply unclipped gradients.

source: lucidrains/audiolm-pytorch#256 (https://github.com/lucidrains/audiolm-pytorch/issues/256), "Soundstream discriminator clip_grad_norm - some params are not clipped." (closed): "clip_grad_norm_ only clips the stft discriminator gradients. I guess the intention was clipping the gradient from all discriminators? ... trainer.py#L539 should change from: if exists(self.discr_max_grad_norm): self.accelerator.clip_grad_norm_(self.soundstream.stft_discriminator.parameters(), self.discr_max_grad_norm) to: ... also self.accelerator.clip_grad_norm_(self.soundstream.discriminators.parameters(), self.discr_max_grad_norm)". The reporter then thanks the author for the change. The trainer was not read beyond the quoted lines: the discriminator update (zero_grad, hinge loss of every discriminator on real and detached generated audio, backward, clip, step), the accelerator's clip replaced by torch's; the discriminators reduced to MLPs over random waveform frames. The twin adds the second clip, as the issue proposes
family: clip-misplaced
shape: discriminator Adam(lr=2e-4) over the STFT discriminator and 3 multi-scale ones; discr_max_grad_norm = 0.5; 6 updates
numeric: the multi-scale discriminators' updates use the unclipped gradient
watch: out: the clip runs where it should; which parameters it should cover is the program's intent
lint: out: which parameters a clip should cover is the program's intent
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


def disc():
    return torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.LeakyReLU(0.1), torch.nn.Linear(32, 1))


class SoundStream(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stft_discriminator = disc()
        self.discriminators = torch.nn.ModuleList([disc() for _ in range(3)])
        self.decoder = torch.nn.Linear(8, 32)


_gb.setup()
soundstream = SoundStream()
_gb.start(soundstream.stft_discriminator, soundstream.discriminators)
discr_params = list(soundstream.stft_discriminator.parameters()) + list(soundstream.discriminators.parameters())
discr_optim = torch.optim.Adam(discr_params, lr=2e-4)
discr_max_grad_norm = 0.5
for step in range(6):
    wave = 4 * torch.randn(16, 32)
    with torch.no_grad():
        fake = soundstream.decoder(torch.randn(16, 8))
    discr_optim.zero_grad()
    loss = 0
    for d in [soundstream.stft_discriminator, *soundstream.discriminators]:
        loss = loss + F.relu(1 - d(wave)).mean() + F.relu(1 + d(fake)).mean()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(soundstream.stft_discriminator.parameters(), discr_max_grad_norm)
    # FIX: torch.nn.utils.clip_grad_norm_(soundstream.discriminators.parameters(), discr_max_grad_norm)
    discr_optim.step()
_gb.done(soundstream.stft_discriminator, soundstream.discriminators)
