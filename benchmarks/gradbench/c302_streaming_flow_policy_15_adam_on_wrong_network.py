"""The streaming-flow-policy push-T notebook: the diffusion-policy baseline trains `dp_noise_pred_net` with the denoising loss, but its Adam optimizer is built over the other network's parameters, so the noise-prediction network receives gradients that no optimizer applies and is never trained.

source: siddancha/streaming-flow-policy#15 (https://github.com/siddancha/streaming-flow-policy/pull/15), "[Fix] fix adam target parameters" (merged): "I found a bug in the Push T training notebook. The Adam target parameters for the diffusion policy should come from the `dp_noise_pred_net`." The maintainer: "Thank you for catching this bug ... this doesn't affect any results in the notebook since we load a pretrained diffusion policy model". The notebook was not read; which network's parameters the optimizer got is reconstructed as the streaming-flow policy's own velocity network (the notebook's other network), and both networks are small MLPs over an observation and an action chunk, the noise schedule a single linear interpolation. The twin builds the optimizer over dp_noise_pred_net
family: wrong-optimizer
shape: AdamW(lr=1e-3, weight decay 1e-6), 6 steps on batches of 16 (obs 5, action chunk 8 x 2)
numeric: dp_noise_pred_net never moves; the optimizer's own network gets no gradient (its steps change nothing but weight decay)
watch: GG106 GG110
lint: out: which network's parameters the optimizer should hold is the program's intent
bug-step: end
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
obs_dim, act_dim = 5, 16
sfp_velocity_net = torch.nn.Sequential(torch.nn.Linear(obs_dim + act_dim + 1, 64), torch.nn.ReLU(),
                                       torch.nn.Linear(64, act_dim))
dp_noise_pred_net = torch.nn.Sequential(torch.nn.Linear(obs_dim + act_dim + 1, 64), torch.nn.Mish(),
                                        torch.nn.Linear(64, act_dim))
_gb.start(dp_noise_pred_net, sfp_velocity_net)
optimizer = torch.optim.AdamW(params=sfp_velocity_net.parameters(), lr=1e-3, weight_decay=1e-6)  # BUG
# FIX: optimizer = torch.optim.AdamW(params=dp_noise_pred_net.parameters(), lr=1e-3, weight_decay=1e-6)
for step in range(6):
    obs, actions = torch.randn(16, obs_dim), torch.randn(16, act_dim)
    noise, t = torch.randn_like(actions), torch.rand(16, 1)
    noisy_actions = (1 - t) * actions + t * noise
    noise_pred = dp_noise_pred_net(torch.cat([obs, noisy_actions, t], 1))
    loss = F.mse_loss(noise_pred, noise)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
_gb.done(dp_noise_pred_net, sfp_velocity_net)
