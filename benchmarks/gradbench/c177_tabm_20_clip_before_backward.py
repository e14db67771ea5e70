"""TabM example: the training step clears the gradients, computes the loss, then (when gradient clipping is on) unscales and clips the gradients before `backward()` fills them, so the clip acts on cleared gradients and the optimizer steps on the unclipped ones.

source: yandex-research/tabm#20 (https://github.com/yandex-research/tabm/issues/20), "Incorrect gradient clipping?": "in example.ipynb, gradient clipping is applied before backward(), so it doesn't do anything as far as I understand. Also, the optimizer is only unscaled if gradient clipping is active". The maintainer (Yura52): "This is definitely a bug. I have just fixed it in 28e47ae" and "The implementation used in experiments reported in the paper uses gradient clipping correctly". The notebook was not read: the step follows the issue (optimizer.zero_grad(); loss = ...; if gradient_clipping_norm is not None: grad_scaler.unscale_(optimizer); clip_grad_norm_(...); grad_scaler.scale(loss).backward(); grad_scaler.step(optimizer); grad_scaler.update()); the scaler is the disabled one of a float32 run; TabM is reduced to an MLP regressor on targets of scale 10 so the clip of 1.0 binds. The twin moves the unscale and the clip after backward(), as the fix does
family: clip-misplaced
shape: AdamW(lr=2e-3, weight_decay=3e-4), gradient_clipping_norm = 1.0; 8 steps on batches of 32
numeric: no step is clipped; the gradient norms are 10-40 against a clip of 1.0
watch: GG116
lint: GG116
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

gradient_clipping_norm = 1.0
_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(12, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
_gb.start(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=3e-4)
grad_scaler = torch.amp.GradScaler("cpu", enabled=False)
X = torch.randn(256, 12)
Y = 10 * X[:, :3].sum(1, keepdim=True) + torch.randn(256, 1)
for i in range(8):
    idx = torch.arange(32 * i, 32 * (i + 1))
    optimizer.zero_grad()
    loss = F.mse_loss(model(X[idx]), Y[idx])
    if gradient_clipping_norm is not None:  # BUG
        grad_scaler.unscale_(optimizer)  # BUG
        torch.nn.utils.clip_grad_norm_(model.parameters(), gradient_clipping_norm)  # BUG
    grad_scaler.scale(loss).backward()
    # FIX: if gradient_clipping_norm is not None:
    # FIX:     grad_scaler.unscale_(optimizer)
    # FIX:     torch.nn.utils.clip_grad_norm_(model.parameters(), gradient_clipping_norm)
    grad_scaler.step(optimizer)
    grad_scaler.update()
_gb.done(model)
