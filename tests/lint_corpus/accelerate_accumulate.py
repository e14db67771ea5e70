"""HF Accelerate with accelerator.accumulate: step()/zero_grad() act only at the window's end and
the loss is divided by the number of micro-batches for you."""
from accelerate import Accelerator


def train(model, optimizer, scheduler, train_dataloader, loss_function, num_epochs, gradient_accumulation_steps):
    accelerator = Accelerator(gradient_accumulation_steps=gradient_accumulation_steps)
    model, optimizer, train_dataloader, scheduler = accelerator.prepare(model, optimizer, train_dataloader, scheduler)
    total_loss = 0.0
    for epoch in range(num_epochs):
        for batch in train_dataloader:
            with accelerator.accumulate(model):
                inputs, targets = batch
                outputs = model(inputs)
                loss = loss_function(outputs, targets)
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            total_loss += loss.detach().float()
    return total_loss
