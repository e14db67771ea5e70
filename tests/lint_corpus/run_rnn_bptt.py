"""Truncated BPTT with an RNN: hidden state from torch.zeros, detached between chunks, clipped."""
import torch
from torch import nn


class CharRNN(nn.Module):
    def __init__(self, n_in, n_hidden, n_out):
        super().__init__()
        self.n_hidden = n_hidden
        self.rnn = nn.RNN(n_in, n_hidden, batch_first=True)
        self.head = nn.Linear(n_hidden, n_out)

    def init_hidden(self, batch):
        return torch.zeros(1, batch, self.n_hidden, dtype=torch.float64)

    def forward(self, x, h):
        out, h = self.rnn(x, h)
        return self.head(out), h


def main():
    torch.manual_seed(0)
    seq = torch.randn(2, 40, 3, dtype=torch.float64)
    target = torch.roll(seq, -1, dims=1)
    model = CharRNN(3, 6, 3).double()
    optimizer = torch.optim.RMSprop(model.parameters(), lr=1e-2)
    bptt = 10
    for epoch in range(2):
        hidden = model.init_hidden(2)
        total_loss = 0.0
        for i in range(0, seq.size(1), bptt):
            hidden = hidden.detach()
            optimizer.zero_grad()
            output, hidden = model(seq[:, i : i + bptt], hidden)
            loss = nn.functional.mse_loss(output, target[:, i : i + bptt])
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
            optimizer.step()
            total_loss += loss.item()
        print(epoch, total_loss)
    return [p.detach().clone() for p in model.parameters()]


if __name__ == "__main__":
    main()
