"""Training with an exponential moving average of the weights (timm's ModelEmaV2 style)."""
import copy

import torch
from torch import nn


class ModelEma:
    def __init__(self, model, decay=0.9):
        self.module = copy.deepcopy(model).eval()
        self.decay = decay
        for p in self.module.parameters():
            p.requires_grad_(False)

    @torch.no_grad()
    def update(self, model):
        for ema_v, model_v in zip(self.module.state_dict().values(), model.state_dict().values()):
            ema_v.copy_(ema_v * self.decay + (1.0 - self.decay) * model_v)


def main():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.SiLU(), nn.Linear(8, 2)).double()
    ema = ModelEma(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.5)
    x = torch.randn(40, 4, dtype=torch.float64)
    y = torch.randn(40, 2, dtype=torch.float64)
    losses_m = 0.0
    for step in range(10):
        idx = slice((step * 4) % 40, (step * 4) % 40 + 4)
        loss = nn.functional.mse_loss(model(x[idx]), y[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        ema.update(model)
        losses_m += loss.item()
    return [p.detach().clone() for p in list(model.parameters()) + list(ema.module.parameters())]


if __name__ == "__main__":
    main()
