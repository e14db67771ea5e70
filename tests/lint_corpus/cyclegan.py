"""CycleGAN-style update: generators and discriminators, set_requires_grad toggling, two optimizers."""
import itertools

import torch
import torch.nn as nn


def set_requires_grad(nets, requires_grad=False):
    for net in nets:
        for param in net.parameters():
            param.requires_grad = requires_grad


class CycleGANModel:
    def __init__(self, netG_A, netG_B, netD_A, netD_B, lr=2e-4, lambda_cycle=10.0):
        self.netG_A, self.netG_B, self.netD_A, self.netD_B = netG_A, netG_B, netD_A, netD_B
        self.criterionGAN = nn.MSELoss()
        self.criterionCycle = nn.L1Loss()
        self.lambda_cycle = lambda_cycle
        self.optimizer_G = torch.optim.Adam(itertools.chain(netG_A.parameters(), netG_B.parameters()), lr=lr, betas=(0.5, 0.999))
        self.optimizer_D = torch.optim.Adam(itertools.chain(netD_A.parameters(), netD_B.parameters()), lr=lr, betas=(0.5, 0.999))

    def backward_D_basic(self, netD, real, fake):
        pred_real = netD(real)
        loss_D_real = self.criterionGAN(pred_real, torch.ones_like(pred_real))
        pred_fake = netD(fake.detach())
        loss_D_fake = self.criterionGAN(pred_fake, torch.zeros_like(pred_fake))
        loss_D = (loss_D_real + loss_D_fake) * 0.5
        loss_D.backward()
        return loss_D

    def optimize_parameters(self, real_A, real_B):
        fake_B = self.netG_A(real_A)
        rec_A = self.netG_B(fake_B)
        fake_A = self.netG_B(real_B)
        rec_B = self.netG_A(fake_A)
        set_requires_grad([self.netD_A, self.netD_B], False)
        self.optimizer_G.zero_grad()
        pred_A = self.netD_A(fake_B)
        pred_B = self.netD_B(fake_A)
        loss_G = (
            self.criterionGAN(pred_A, torch.ones_like(pred_A))
            + self.criterionGAN(pred_B, torch.ones_like(pred_B))
            + self.criterionCycle(rec_A, real_A) * self.lambda_cycle
            + self.criterionCycle(rec_B, real_B) * self.lambda_cycle
        )
        loss_G.backward()
        self.optimizer_G.step()
        set_requires_grad([self.netD_A, self.netD_B], True)
        self.optimizer_D.zero_grad()
        self.backward_D_basic(self.netD_A, real_B, fake_B)
        self.backward_D_basic(self.netD_B, real_A, fake_A)
        self.optimizer_D.step()


def train(model, dataset, n_epochs):
    for epoch in range(n_epochs):
        for data in dataset:
            model.optimize_parameters(data["A"], data["B"])
