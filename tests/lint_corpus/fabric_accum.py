# mutation: skip drop-last-window (the function asserts len(dataloader) % accumulate_grad_batches == 0: the last-batch term never adds a step)
"""Fabric with gradient accumulation: no_backward_sync while accumulating, loss divided by hand."""
import lightning as L
import torch


def train(fabric: L.Fabric, model, optimizer, dataloader, accumulate_grad_batches=4, max_epochs=2):
    assert len(dataloader) % accumulate_grad_batches == 0  # whole windows: every loss is divided by their size
    for epoch in range(max_epochs):
        for iteration, batch in enumerate(dataloader):
            # the loader's last batch closes a partial window: it syncs and steps too
            is_accumulating = (iteration + 1) % accumulate_grad_batches != 0 and iteration + 1 < len(dataloader)
            with fabric.no_backward_sync(model, enabled=is_accumulating):
                output = model(batch["x"])
                loss = torch.nn.functional.cross_entropy(output, batch["y"])
                fabric.backward(loss / accumulate_grad_batches)
            if not is_accumulating:
                fabric.clip_gradients(model, optimizer, max_norm=1.0)
                optimizer.step()
                optimizer.zero_grad()
