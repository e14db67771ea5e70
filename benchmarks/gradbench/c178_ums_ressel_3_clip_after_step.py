"""UMS-ResSel post-training: each step calls `loss.backward()`, `optimizer.step()` and only then `clip_grad_norm_`, so the update uses the unclipped gradients and the clip only touches gradients that the next `zero_grad()` clears.

source: taesunwhang/UMS-ResSel#3 (https://github.com/taesunwhang/UMS-ResSel/issues/3), "Maybe wrong grad clipping": post_train/post_training.py#L162 places the clip after optimizer.step, "the grad clipping should be placed before optimizer.step, or it will never be used". The author (taesunwhang): "as you pointed out, it should be placed before optimizer.step ... I have fixed this" (commit 825214d). The script was not read beyond the issue: BERT post-training is reduced to an MLP response classifier with AdamW and max_gradient_norm 1.0 on inputs of scale 5 (gradient norms above the clip). The twin clips between backward and step, the author's fix
family: clip-misplaced
shape: AdamW(lr=1e-3), max_gradient_norm = 1.0; 8 steps on batches of 32
numeric: every step applies the unclipped gradient (norms 3-10 against a clip of 1.0)
watch: GG116
lint: GG116
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

max_gradient_norm = 1.0
_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(48, 64), torch.nn.Tanh(), torch.nn.Linear(64, 2))
_gb.start(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(8):
    x, y = 5 * torch.randn(32, 48), torch.randint(0, 2, (32,))
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    # FIX: torch.nn.utils.clip_grad_norm_(model.parameters(), max_gradient_norm)
    optimizer.step()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_gradient_norm)  # BUG
_gb.done(model)
