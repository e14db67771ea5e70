"""GG112: the gradient clipped while the GradScaler's scale is still in it (no unscale_ first)."""
import torch
import torch.nn.functional as F

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
scaler = torch.amp.GradScaler("cpu")  # the CPU's GradScaler scales like the CUDA one (65536 at the start)
for _ in range(3):
    x, y = torch.randn(16, 8), torch.randn(16, 1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = F.mse_loss(model(x).float(), y)
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)  # BUG: the norm is 65536x too large
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
