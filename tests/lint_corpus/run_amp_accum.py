# mutation: skip drop-last-window (8 batches in windows of 2: the last-batch term never adds a step, the mutant trains the same)
"""AMP-style accumulation with a GradScaler (disabled on CPU): scaled loss, unscale, clip, step."""
import torch
from torch import nn


def main():
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = nn.Sequential(nn.Linear(6, 12), nn.GELU(), nn.Linear(12, 1)).double().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)
    scaler = torch.amp.GradScaler(enabled=False)
    iters_to_accumulate = 2
    assert (40 // 5) % iters_to_accumulate == 0  # whole windows: every loss is divided by iters_to_accumulate
    data = torch.randn(40, 6, dtype=torch.float64, device=device)
    target = data.mean(dim=1, keepdim=True)
    for epoch in range(2):
        for i in range(0, 40, 5):
            x, y = data[i : i + 5], target[i : i + 5]
            with torch.autocast(device_type=device, enabled=False):
                output = model(x)
                loss = nn.functional.smooth_l1_loss(output, y)
                loss = loss / iters_to_accumulate
            scaler.scale(loss).backward()
            if ((i // 5) + 1) % iters_to_accumulate == 0 or i + 5 >= 40:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()
    return [p.detach().clone() for p in model.parameters()]


if __name__ == "__main__":
    main()
