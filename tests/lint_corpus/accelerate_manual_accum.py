# mutation: skip drop-last-window (the function asserts len(train_dataloader) % gradient_accumulation_steps == 0: the last-batch term never adds a step)
"""HF transformers' run_clm_no_trainer: Accelerate, manual accumulation with the loss divided by hand."""
import math

import torch
from accelerate import Accelerator
from tqdm.auto import tqdm


def main(args, model, train_dataloader, eval_dataloader, optimizer, lr_scheduler):
    accelerator = Accelerator()
    model, optimizer, train_dataloader, eval_dataloader, lr_scheduler = accelerator.prepare(
        model, optimizer, train_dataloader, eval_dataloader, lr_scheduler
    )
    # whole windows only: a last, shorter window would get its losses divided by the full size
    assert len(train_dataloader) % args.gradient_accumulation_steps == 0
    num_update_steps_per_epoch = math.ceil(len(train_dataloader) / args.gradient_accumulation_steps)
    max_train_steps = args.num_train_epochs * num_update_steps_per_epoch
    progress_bar = tqdm(range(max_train_steps), disable=not accelerator.is_local_main_process)
    completed_steps = 0
    for epoch in range(args.num_train_epochs):
        model.train()
        total_loss = 0
        for step, batch in enumerate(train_dataloader):
            outputs = model(**batch)
            loss = outputs.loss
            total_loss += loss.detach().float()
            loss = loss / args.gradient_accumulation_steps
            accelerator.backward(loss)
            if (step + 1) % args.gradient_accumulation_steps == 0 or step == len(train_dataloader) - 1:
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad()
                progress_bar.update(1)
                completed_steps += 1
            if completed_steps >= max_train_steps:
                break
        model.eval()
        losses = []
        for step, batch in enumerate(eval_dataloader):
            with torch.no_grad():
                outputs = model(**batch)
            loss = outputs.loss
            losses.append(accelerator.gather_for_metrics(loss.repeat(args.per_device_eval_batch_size)))
        losses = torch.cat(losses)
        perplexity = math.exp(torch.mean(losses))
        accelerator.print(f"epoch {epoch}: perplexity {perplexity}")
