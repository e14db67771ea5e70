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


class PreferenceBase(Trainer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # the loss is a mean over pairs, not a sum over tokens: the Trainer must divide it
        self.model_accepts_loss_kwargs = False


class PairwiseTrainer(PreferenceBase):  # a base sets the flag: the Trainer divides the mean
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        chosen = model(inputs["chosen"]).logits[:, -1]
        rejected = model(inputs["rejected"]).logits[:, -1]
        return -F.logsigmoid(chosen - rejected).mean()


class SaysItIsScaled(Trainer):
    loss_is_scaled_for_ga = False  # transformers 5: training_step divides by the accumulation steps

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        return model(**inputs).loss


class ScalesItself(Trainer):
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss = model(**inputs).loss
        if self.model.training:
            loss = loss / self.current_gradient_accumulation_steps
        return loss


class DistillTrainer(Trainer):
    def __init__(self, *args, teacher=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.teacher = teacher
        self.model_accepts_loss_kwargs = False  # a mean per micro-batch: the Trainer divides it by the steps

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        logits = model(input_ids=inputs["input_ids"]).logits
        with torch.no_grad():
            teacher_logits = self.teacher(inputs["input_ids"]).logits
        return F.kl_div(F.log_softmax(logits, -1), F.softmax(teacher_logits, -1), reduction="batchmean")
