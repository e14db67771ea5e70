"""K-fold cross-validation: a fresh model and optimizer per fold, the usual loop inside."""
import torch
from torch import nn


def folds(n, k):
    idx = torch.arange(n)
    size = n // k
    for f in range(k):
        val = idx[f * size : (f + 1) * size]
        train = torch.cat([idx[: f * size], idx[(f + 1) * size :]])
        yield train, val


def main():
    torch.manual_seed(0)
    x = torch.randn(30, 3, dtype=torch.float64)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5]], dtype=torch.float64)
    results, params = [], []
    for fold, (tr, va) in enumerate(folds(30, 3)):
        torch.manual_seed(fold)
        model = nn.Linear(3, 1).double()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
        for epoch in range(3):
            epoch_loss = 0.0
            for i in range(0, len(tr), 5):
                b = tr[i : i + 5]
                optimizer.zero_grad()
                loss = nn.functional.mse_loss(model(x[b]), y[b])
                loss.backward()
                optimizer.step()
                epoch_loss += loss.item()
        with torch.no_grad():
            results.append(nn.functional.mse_loss(model(x[va]), y[va]).item())
        params += [p.detach().clone() for p in model.parameters()]
    print(sum(results) / len(results))
    return params


if __name__ == "__main__":
    main()
