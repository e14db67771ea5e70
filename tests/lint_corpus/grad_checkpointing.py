"""Activation (gradient) checkpointing: the blocks are recomputed in backward; the loop
accumulates over a micro-batch loop and steps once per batch."""
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.ff = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        return x + self.ff(x)


class Net(nn.Module):
    def __init__(self, dim=32, depth=4, use_checkpoint=True):
        super().__init__()
        self.blocks = nn.ModuleList(Block(dim) for _ in range(depth))
        self.head = nn.Linear(dim, 10)
        self.use_checkpoint = use_checkpoint

    def forward(self, x):
        for block in self.blocks:
            if self.use_checkpoint and self.training:
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        return self.head(x.mean(dim=1))


def train(model, loader, epochs=1, micro_batches=4, lr=3e-4):
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.05)
    criterion = nn.CrossEntropyLoss()
    model.train()
    for epoch in range(epochs):
        epoch_loss = 0.0
        for x, y in loader:
            optimizer.zero_grad(set_to_none=True)
            for xs, ys in zip(x.chunk(micro_batches), y.chunk(micro_batches)):
                loss = criterion(model(xs), ys) / micro_batches
                loss.backward()
                epoch_loss += loss.item()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
        print(f"epoch {epoch}: {epoch_loss / len(loader):.4f}")


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    correct = total = 0
    for x, y in loader:
        correct += (model(x).argmax(-1) == y).sum().item()
        total += y.numel()
    return correct / max(total, 1)
