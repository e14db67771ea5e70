"""HF Accelerate without accumulation (the nlp_example shape): accelerator.backward, then step and clear."""
import torch
from accelerate import Accelerator
from torch.optim import AdamW
from transformers import get_linear_schedule_with_warmup


def training_function(config, model, train_dataloader, eval_dataloader, metric):
    accelerator = Accelerator(cpu=config["cpu"], mixed_precision=config["mixed_precision"])
    optimizer = AdamW(params=model.parameters(), lr=config["lr"])
    lr_scheduler = get_linear_schedule_with_warmup(
        optimizer=optimizer, num_warmup_steps=100, num_training_steps=len(train_dataloader) * config["num_epochs"]
    )
    model, optimizer, train_dataloader, eval_dataloader, lr_scheduler = accelerator.prepare(
        model, optimizer, train_dataloader, eval_dataloader, lr_scheduler
    )
    for epoch in range(config["num_epochs"]):
        model.train()
        for step, batch in enumerate(train_dataloader):
            outputs = model(**batch)
            loss = outputs.loss
            accelerator.backward(loss)
            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad()
        model.eval()
        for step, batch in enumerate(eval_dataloader):
            with torch.no_grad():
                outputs = model(**batch)
            predictions = outputs.logits.argmax(dim=-1)
            predictions, references = accelerator.gather_for_metrics((predictions, batch["labels"]))
            metric.add_batch(predictions=predictions, references=references)
        accelerator.print(f"epoch {epoch}:", metric.compute())
