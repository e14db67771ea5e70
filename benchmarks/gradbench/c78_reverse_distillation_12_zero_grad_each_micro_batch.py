"""RD++ (Revisiting Reverse Distillation): both optimizers are cleared before every backward pass of a 2-batch accumulation window.

source: tientrandinh/Revisiting-Reverse-Distillation#12 (https://github.com/tientrandinh/Revisiting-Reverse-Distillation/issues/12), "Is it something wrong with grad acc?": zero_grad() of optimizer_proj and optimizer_distill before loss.backward(), the steps under `if (i + 1) % accumulation_steps == 0`; the author: "you are right ... I fixed it" (main.py at 10202ef read)
family: misplaced-clear
shape: for i, (img, img_noise, _): L_proj = proj_loss(...); L_distill = loss_fucntion(inputs, decoder(bn(feature_space))); loss = L_distill + weight_proj * L_proj; optimizer_proj.zero_grad(); optimizer_distill.zero_grad(); loss.backward(); if (i + 1) % accumulation_steps == 0: optimizer_proj.step(); optimizer_distill.step() (accumulation_steps = 2, two Adam optimizers). Fixed twin: the clears after the steps, as the author's fix, and the loss divided by accumulation_steps (the fix left the two micro-batches' means summed, itself an unscaled window; the twin is the correct program)
numeric: every step uses only the second micro-batch of its window; the first is discarded
watch: GG102
lint: GG102
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
proj_layer = torch.nn.Linear(8, 8)
decoder = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))
bn = torch.nn.Linear(8, 8)
encoder = torch.nn.Linear(8, 8).requires_grad_(False)
_gb.start(proj_layer, decoder, bn)
optimizer_proj = torch.optim.Adam(list(proj_layer.parameters()), lr=0.001, betas=(0.5, 0.999))
optimizer_distill = torch.optim.Adam(list(decoder.parameters()) + list(bn.parameters()), lr=0.005, betas=(0.5, 0.999))
accumulation_steps = 2
for epoch in range(2):
    for i in range(4):
        img = torch.randn(4, 8)
        img_noise = img + 0.1 * torch.randn(4, 8)
        inputs, inputs_noise = encoder(img), encoder(img_noise)
        feature_space, feature_space_noise = proj_layer(inputs), proj_layer(inputs_noise)
        L_proj = F.mse_loss(feature_space_noise, feature_space.detach()) + F.mse_loss(feature_space, inputs)
        outputs = decoder(bn(feature_space))
        L_distill = 1 - F.cosine_similarity(inputs, outputs).mean()
        loss = L_distill + 0.2 * L_proj
        # FIX: loss = loss / accumulation_steps
        optimizer_proj.zero_grad()  # BUG
        optimizer_distill.zero_grad()  # BUG
        loss.backward()
        if (i + 1) % accumulation_steps == 0:
            optimizer_proj.step()
            optimizer_distill.step()
            # FIX: optimizer_proj.zero_grad()
            # FIX: optimizer_distill.zero_grad()
_gb.done(proj_layer, decoder, bn)
