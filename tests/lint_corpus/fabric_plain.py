"""Lightning Fabric: fabric.backward is a backward pass; clearing is the user's job."""
import lightning as L
import torch
import torch.nn.functional as F


def run(model, train_loader, num_epochs=3, lr=1e-3):
    fabric = L.Fabric(accelerator="cpu", devices=1)
    fabric.launch()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    model, optimizer = fabric.setup(model, optimizer)
    train_loader = fabric.setup_dataloaders(train_loader)
    for epoch in range(num_epochs):
        model.train()
        epoch_loss = 0.0
        for batch_idx, (data, target) in enumerate(train_loader):
            optimizer.zero_grad()
            output = model(data)
            loss = F.nll_loss(output, target)
            fabric.backward(loss)
            optimizer.step()
            epoch_loss += loss.item()
        fabric.print(f"epoch {epoch}: {epoch_loss / len(train_loader):.4f}")
