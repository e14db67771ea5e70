"""Manual SGD without torch.optim (the classic tutorial): update under no_grad, then clear each .grad."""
import torch


def main():
    torch.manual_seed(0)
    x = torch.linspace(-1, 1, 50, dtype=torch.float64)
    y = 2.0 * x ** 3 - x + 0.5
    a = torch.randn((), dtype=torch.float64, requires_grad=True)
    b = torch.randn((), dtype=torch.float64, requires_grad=True)
    c = torch.randn((), dtype=torch.float64, requires_grad=True)
    d = torch.randn((), dtype=torch.float64, requires_grad=True)
    learning_rate = 1e-3
    for t in range(60):
        y_pred = a + b * x + c * x ** 2 + d * x ** 3
        loss = (y_pred - y).pow(2).sum()
        if t % 20 == 19:
            print(t, loss.item())
        loss.backward()
        with torch.no_grad():
            a -= learning_rate * a.grad
            b -= learning_rate * b.grad
            c -= learning_rate * c.grad
            d -= learning_rate * d.grad
            a.grad = None
            b.grad = None
            c.grad = None
            d.grad = None
    return [a.detach().clone(), b.detach().clone(), c.detach().clone(), d.detach().clone()]


if __name__ == "__main__":
    main()
