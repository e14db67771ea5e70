"""A criterion in the style of multi-output (non-autoregressive, set-prediction) models: it collects
one loss term per output head in a loop and returns their sum, which the training loop back-propagates.
The running list of terms is the loss itself, not a log of it."""
import torch
from torch import nn


class MultiHeadCriterion:
    def __init__(self, factors):
        self.factors = factors

    def term(self, out, target, factor):
        return {"loss": nn.functional.mse_loss(out, target) * factor, "factor": factor}

    def __call__(self, outputs, targets):
        losses = []
        for name in outputs:
            head_losses = self.term(outputs[name], targets[name], self.factors[name])
            losses += [head_losses]
        loss = sum(item["loss"] for item in losses)
        logged = {name: float(item["loss"].detach() / item["factor"]) for name, item in zip(outputs, losses)}
        return loss, logged


def main():
    torch.manual_seed(0)
    x = torch.randn(24, 4, dtype=torch.float64)
    ya, yb = torch.randn(24, 2, dtype=torch.float64), torch.randn(24, 1, dtype=torch.float64)
    heads = nn.ModuleDict({"a": nn.Linear(4, 2), "b": nn.Linear(4, 1)}).double()
    criterion = MultiHeadCriterion({"a": 1.0, "b": 0.5})
    optimizer = torch.optim.SGD(heads.parameters(), lr=0.1)
    for epoch in range(3):
        for i in range(0, 24, 8):
            optimizer.zero_grad()
            outputs = {name: head(x[i : i + 8]) for name, head in heads.items()}
            loss, logged = criterion(outputs, {"a": ya[i : i + 8], "b": yb[i : i + 8]})
            loss.backward()
            optimizer.step()
    return [p.detach().clone() for p in heads.parameters()]


if __name__ == "__main__":
    main()
