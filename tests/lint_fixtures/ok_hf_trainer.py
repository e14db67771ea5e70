"""Correct: an HF Trainer subclass overriding compute_loss and training_step (no finding expected)."""
import torch
from transformers import Trainer


class WeightedTrainer(Trainer):
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        labels = inputs.pop("labels")
        outputs = model(**inputs)
        logits = outputs.logits.view(-1, outputs.logits.size(-1))
        if num_items_in_batch is None:
            loss = torch.nn.functional.cross_entropy(logits, labels.view(-1))
        else:
            loss = torch.nn.functional.cross_entropy(logits, labels.view(-1), reduction="sum") / num_items_in_batch
        return (loss, outputs) if return_outputs else loss

    def training_step(self, model, inputs, num_items_in_batch=None):
        model.train()
        inputs = self._prepare_inputs(inputs)
        loss = self.compute_loss(model, inputs)
        loss.backward()
        return loss.detach()

    def my_inner_loop(self, loader):
        for step, inputs in enumerate(loader):
            loss = self.training_step(self.model, inputs)
            self.total += loss
            if (step + 1) % self.args.gradient_accumulation_steps == 0:
                self.optimizer.step()
            self.optimizer.zero_grad()
