"""A runner in the style of mmengine: the training loop logs float losses into history buffers,
and the validation summary sums their means. The buffers hold numbers: the sum keeps no graph."""
import torch


class HistoryBuffer:
    def __init__(self):
        self.values = []

    def update(self, value):
        self.values.append(float(value))

    def mean(self):
        return sum(self.values) / max(len(self.values), 1)


def parse_losses(losses, stage):
    all_loss = 0
    loss_dict = {}
    for loss_name, loss_value in losses.items():
        avg_loss = loss_value.mean()
        loss_dict[loss_name] = avg_loss
        if "loss" in loss_name:
            all_loss += avg_loss
    loss_dict[f"{stage}_loss"] = all_loss
    return loss_dict


def train(model, optimizer, loader, loss_fn):
    history = {"loss": HistoryBuffer()}
    for x, y in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        history["loss"].update(loss.item())
    return parse_losses(history, "train")
