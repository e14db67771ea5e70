"""A GAN in the DCGAN style: two optimizers, each network cleared before its own backward."""
import torch
from torch import nn


def main():
    torch.manual_seed(0)
    real = torch.randn(64, 2, dtype=torch.float64) * 0.5 + 1.0
    netG = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 2)).double()
    netD = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 1)).double()
    criterion = nn.BCEWithLogitsLoss()
    optimizerD = torch.optim.Adam(netD.parameters(), lr=1e-2, betas=(0.5, 0.999))
    optimizerG = torch.optim.Adam(netG.parameters(), lr=1e-2, betas=(0.5, 0.999))
    for epoch in range(2):
        for i in range(0, 64, 16):
            real_cpu = real[i : i + 16]
            b = real_cpu.size(0)
            # (1) Update D network: maximize log(D(x)) + log(1 - D(G(z)))
            netD.zero_grad()
            label = torch.ones(b, 1, dtype=torch.float64)
            errD_real = criterion(netD(real_cpu), label)
            errD_real.backward()
            noise = torch.randn(b, 3, dtype=torch.float64)
            fake = netG(noise)
            label = torch.zeros(b, 1, dtype=torch.float64)
            errD_fake = criterion(netD(fake.detach()), label)
            errD_fake.backward()
            errD = errD_real + errD_fake
            optimizerD.step()
            # (2) Update G network: maximize log(D(G(z)))
            netG.zero_grad()
            label = torch.ones(b, 1, dtype=torch.float64)
            errG = criterion(netD(fake), label)
            errG.backward()
            optimizerG.step()
            print(f"[{epoch}][{i}] Loss_D: {errD.item():.4f} Loss_G: {errG.item():.4f}")
    return [p.detach().clone() for p in list(netG.parameters()) + list(netD.parameters())]


if __name__ == "__main__":
    main()
