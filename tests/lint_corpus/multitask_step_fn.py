"""A train_step helper called from the epoch loop; two task heads, losses summed, one optimizer."""
import torch


def train_step(model, optimizer, batch, task_weights):
    optimizer.zero_grad(set_to_none=True)
    out_a, out_b = model(batch["x"])
    loss_a = torch.nn.functional.cross_entropy(out_a, batch["y_a"])
    loss_b = torch.nn.functional.mse_loss(out_b, batch["y_b"])
    loss = task_weights[0] * loss_a + task_weights[1] * loss_b
    loss.backward()
    optimizer.step()
    return loss.item()


def fit(model, loader, epochs=5):
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs * len(loader))
    for epoch in range(epochs):
        epoch_loss = 0.0
        for batch in loader:
            epoch_loss += train_step(model, optimizer, batch, (1.0, 0.5))
            scheduler.step()
        print(epoch, epoch_loss / len(loader))
