"""GG301: an HF Trainer compute_loss override that takes num_items_in_batch and ignores it."""
import torch
import torch.nn.functional as F
from transformers import Seq2SeqTrainer, Trainer


class MeanLossTrainer(Trainer):
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):  # expect: GG301
        labels = inputs.pop("labels")
        outputs = model(**inputs)
        loss = F.cross_entropy(outputs.logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
        return (loss, outputs) if return_outputs else loss


class KeywordOnly(Seq2SeqTrainer):
    def compute_loss(self, model, inputs, *, return_outputs=False, num_items_in_batch=None):  # expect: GG301
        return model(**inputs).loss


class WeightedLossTrainer(Trainer):  # class weights, a per-micro-batch mean whatever the window
    def __init__(self, *args, class_weights=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.class_weights = class_weights

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):  # expect: GG301
        labels = inputs.pop("labels")
        outputs = model(**inputs)
        logits = outputs.get("logits")
        loss_fct = torch.nn.CrossEntropyLoss(weight=self.class_weights.to(logits.device))
        loss = loss_fct(logits.view(-1, self.model.config.num_labels), labels.view(-1))
        return (loss, outputs) if return_outputs else loss


class LoggingTrainer(Trainer):  # a base that sets other state, not the scaling flag
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.model_accepts_loss_kwargs_logged = False


class PolicyTrainer(LoggingTrainer):
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):  # expect: GG301
        return model(**inputs).loss.mean()


class DistillTrainer(Trainer):
    def __init__(self, *args, teacher=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.teacher = teacher
        # self.model_accepts_loss_kwargs = False   (a comment: the Trainer still trusts the loss)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):  # expect: GG301
        logits = model(input_ids=inputs["input_ids"]).logits
        with torch.no_grad():
            teacher_logits = self.teacher(inputs["input_ids"]).logits
        kd = F.kl_div(F.log_softmax(logits, -1), F.softmax(teacher_logits, -1), reduction="batchmean")
        return kd
