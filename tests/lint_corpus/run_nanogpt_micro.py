"""nanoGPT's training loop: micro-steps in an inner loop, loss scaled by the number of micro-steps."""
import torch
from torch import nn

gradient_accumulation_steps = 4
grad_clip = 1.0
max_iters = 6
batch_size = 4


def get_batch(gen):
    x = torch.randn(batch_size, 8, generator=gen, dtype=torch.float64)
    y = torch.randn(batch_size, 8, generator=gen, dtype=torch.float64)
    return x, y


def main():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 8)).double()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    X, Y = get_batch(gen)
    iter_num = 0
    while True:
        for micro_step in range(gradient_accumulation_steps):
            logits = model(X)
            loss = nn.functional.mse_loss(logits, Y)
            loss = loss / gradient_accumulation_steps  # scale the loss to account for gradient accumulation
            # immediately async prefetch next batch while model is doing the forward pass
            X, Y = get_batch(gen)
            loss.backward()
        if grad_clip != 0.0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        # flush the gradients as soon as we can, no need for this memory anymore
        optimizer.zero_grad(set_to_none=True)
        lossf = loss.item() * gradient_accumulation_steps
        iter_num += 1
        if iter_num > max_iters:
            break
    print(f"iter {iter_num}: loss {lossf:.4f}")
    return [p.detach().clone() for p in model.parameters()]


if __name__ == "__main__":
    main()
