"""Distillation Trainer whose compute_loss averages each micro-batch and ignores num_items_in_batch.

source: MakazhanAlpamys/Soup#720 (https://github.com/MakazhanAlpamys/Soup/issues/720), "Distillation compute_loss ignores num_items_in_batch and can over-scale gradient accumulation": "affected / reference ratio: 4.0" with four equal micro-batches
family: num-items
shape: class _DistillTrainer(Trainer): compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None) mixes a CE term and a KD term, each a mean over the micro-batch; the model accepts loss kwargs and model_accepts_loss_kwargs is not set to False, so the Trainer does not divide by gradient_accumulation_steps
numeric: the step's gradient is gradient_accumulation_steps (4) times the window mean
watch: GG104
lint: GG301
trainer: yes
bug-step: 1
"""
import torch
import torch.nn.functional as F
from transformers import Trainer

import _gb
import _hf


class Student(torch.nn.Module):
    def __init__(self, vocab=32, d=8):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d)
        self.head = torch.nn.Linear(d, vocab)

    def forward(self, input_ids, labels=None, **kwargs):
        return {"logits": self.head(torch.tanh(self.embed(input_ids)))}


class _DistillTrainer(Trainer):
    def __init__(self, *args, teacher=None, alpha=0.5, **kwargs):
        super().__init__(*args, **kwargs)
        self.teacher = teacher
        self.alpha = alpha
        # FIX: self.model_accepts_loss_kwargs = False

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        logits = model(input_ids=inputs["input_ids"])["logits"]
        with torch.no_grad():
            teacher_logits = self.teacher(inputs["input_ids"])
        labels = inputs["labels"]
        ce = F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), ignore_index=-100)
        kd = F.kl_div(F.log_softmax(logits, -1), F.softmax(teacher_logits, -1), reduction="batchmean")
        loss = self.alpha * ce + (1 - self.alpha) * kd
        return (loss, {"logits": logits}) if return_outputs else loss


_gb.setup()
model = Student()
teacher = torch.nn.Sequential(torch.nn.Embedding(32, 8), torch.nn.Linear(8, 32))
teacher.requires_grad_(False)
_gb.start(model)
trainer = _DistillTrainer(model=model, args=_hf.args(gradient_accumulation_steps=4, per_device_train_batch_size=1),
                          train_dataset=_hf.token_dataset([12] * 12), teacher=teacher)
trainer.train()
_gb.done(model)
