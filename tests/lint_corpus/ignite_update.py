"""PyTorch-Ignite: the update function handed to an Engine is called once per batch, so its body
is one iteration of the training loop; the engine runs the loop and the event handlers."""
import torch
from ignite.engine import Engine, Events


def create_trainer(model, optimizer, loss_fn, device):
    def train_step(engine, batch):
        model.train()
        optimizer.zero_grad()
        x, y = batch[0].to(device), batch[1].to(device)
        y_pred = model(x)
        loss = loss_fn(y_pred, y)
        loss.backward()
        optimizer.step()
        return loss.item()

    trainer = Engine(train_step)

    @trainer.on(Events.EPOCH_COMPLETED)
    def log_epoch(engine):
        print(f"epoch {engine.state.epoch}: loss {engine.state.output:.4f}")

    return trainer


def run(model, loader, epochs=2):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    trainer = create_trainer(model, optimizer, torch.nn.functional.cross_entropy, "cpu")
    trainer.run(loader, max_epochs=epochs)
