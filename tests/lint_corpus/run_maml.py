"""MAML-style meta-learning: inner steps with torch.autograd.grad (no .grad), outer step with .backward()."""
import torch
from torch import nn
from torch.func import functional_call


def main():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1, 16), nn.Tanh(), nn.Linear(16, 1)).double()
    meta_optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    inner_lr = 0.1
    gen = torch.Generator().manual_seed(3)
    for meta_iter in range(5):
        meta_optimizer.zero_grad()
        meta_loss = 0.0
        for task in range(3):
            amp = torch.rand((), generator=gen, dtype=torch.float64) + 0.5
            xs = torch.rand(10, 1, generator=gen, dtype=torch.float64) * 4 - 2
            xq = torch.rand(10, 1, generator=gen, dtype=torch.float64) * 4 - 2
            params = dict(model.named_parameters())
            for _ in range(2):
                support_loss = nn.functional.mse_loss(functional_call(model, params, (xs,)), amp * torch.sin(xs))
                grads = torch.autograd.grad(support_loss, list(params.values()), create_graph=True)
                params = {name: w - inner_lr * g for (name, w), g in zip(params.items(), grads)}
            query_loss = nn.functional.mse_loss(functional_call(model, params, (xq,)), amp * torch.sin(xq))
            meta_loss = meta_loss + query_loss / 3
        meta_loss.backward()
        meta_optimizer.step()
    return [p.detach().clone() for p in model.parameters()]


if __name__ == "__main__":
    main()
