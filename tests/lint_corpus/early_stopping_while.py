"""Training inside `while not done:` with early stopping on a validation loss computed under
torch.inference_mode()."""
import torch
from torch import nn


def validate(model, x, y):
    model.eval()
    with torch.inference_mode():
        val_loss = 0.0
        for i in range(0, x.shape[0], 8):
            val_loss += nn.functional.mse_loss(model(x[i : i + 8]), y[i : i + 8]).item()
    model.train()
    return val_loss


def main():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1)).double()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    x = torch.randn(48, 4, dtype=torch.float64)
    y = (x ** 2).sum(dim=1, keepdim=True)
    xv, yv = x[32:], y[32:]
    best, bad_epochs, patience, epoch, done = float("inf"), 0, 2, 0, False
    while not done:
        train_loss = 0.0
        for i in range(0, 32, 8):
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x[i : i + 8]), y[i : i + 8])
            loss.backward()
            optimizer.step()
            train_loss += loss.item()
        val = validate(model, xv, yv)
        epoch += 1
        if val < best - 1e-4:
            best, bad_epochs = val, 0
        else:
            bad_epochs += 1
        done = bad_epochs >= patience or epoch >= 5
        print(f"epoch {epoch} train {train_loss:.3f} val {val:.3f}")
    return [p.detach().clone() for p in model.parameters()]


if __name__ == "__main__":
    main()
