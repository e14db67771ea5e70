"""An HF Trainer subclass overriding compute_loss (weighted classes): the Trainer's own loop steps."""
import torch
from transformers import Trainer


class WeightedLossTrainer(Trainer):
    def __init__(self, *args, class_weights=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.class_weights = class_weights

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        labels = inputs.pop("labels")
        outputs = model(**inputs)
        logits = outputs.get("logits")
        # summed over the items, then divided by the window's item count the Trainer passes in:
        # every item of an accumulation window weighs the same
        reduction = "sum" if num_items_in_batch is not None else "mean"
        loss_fct = torch.nn.CrossEntropyLoss(weight=self.class_weights.to(logits.device), reduction=reduction)
        loss = loss_fct(logits.view(-1, self.model.config.num_labels), labels.view(-1))
        if num_items_in_batch is not None:
            loss = loss / num_items_in_batch
        return (loss, outputs) if return_outputs else loss
