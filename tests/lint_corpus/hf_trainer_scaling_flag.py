"""TRL-style trainers on the HF Trainer: a base class sets `model_accepts_loss_kwargs = False`,
so the Trainer itself divides each micro-batch's mean loss by the accumulation steps; the
subclasses' compute_loss may then ignore num_items_in_batch."""
import torch.nn.functional as F
from transformers import Trainer


class PreferenceTrainerBase(Trainer):
    def __init__(self, *args, beta=0.1, **kwargs):
        super().__init__(*args, **kwargs)
        self.beta = beta
        # the loss is a mean over pairs: let the Trainer scale it for gradient accumulation
        self.model_accepts_loss_kwargs = False


class PairwiseTrainer(PreferenceTrainerBase):
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        chosen = model(input_ids=inputs["chosen_input_ids"]).logits[:, -1, 0]
        rejected = model(input_ids=inputs["rejected_input_ids"]).logits[:, -1, 0]
        loss = -F.logsigmoid(self.beta * (chosen - rejected)).mean()
        return (loss, {"chosen": chosen}) if return_outputs else loss


class DistillTrainer(Trainer):
    loss_is_scaled_for_ga = False  # transformers 5: the Trainer divides by the accumulation steps

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        student = model(**inputs).logits
        teacher = inputs["teacher_logits"]
        loss = F.kl_div(F.log_softmax(student, -1), F.softmax(teacher, -1), reduction="batchmean")
        return loss
