"""GG301: correct code of the same shapes (no finding expected)."""
import torch
import torch.nn.functional as F
from transformers import Seq2SeqTrainer, Trainer


class SumOverItems(Trainer):
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        labels = inputs.pop("labels")
        outputs = model(**inputs)
        loss = F.cross_entropy(outputs.logits.flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="sum")
        loss = loss / num_items_in_batch if num_items_in_batch is not None else loss / (labels != -100).sum()
        return (loss, outputs) if return_outputs else loss


class Forwards(Trainer):
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        inputs = {k: v for k, v in inputs.items() if k != "extra"}
        return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)


class NoParameter(Trainer):  # the Trainer scales a mean for a compute_loss without the parameter
    def compute_loss(self, model, inputs, return_outputs=False, **kwargs):
        outputs = model(**inputs)
        return (outputs.loss, outputs) if return_outputs else outputs.loss


class NotATrainer:
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        return model(**inputs).loss
