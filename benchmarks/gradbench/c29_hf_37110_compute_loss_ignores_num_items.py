"""HF Trainer subclass whose compute_loss ignores num_items_in_batch: the gradient is K times too large.

source: huggingface/transformers#37110 (https://github.com/huggingface/transformers/issues/37110), "The loss and gradient explosion caused by the trainer" (a compute_loss override on a model that accepts loss kwargs); the same mechanism in MakazhanAlpamys/Soup#720 ("Distillation compute_loss ignores num_items_in_batch and can over-scale gradient accumulation")
family: num-items
shape: class NTPTrainer(Trainer): def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None): returns the token-mean loss of its micro-batch; the model's forward takes **kwargs, so the Trainer assumes the loss is already divided by the window's token count and does not divide by gradient_accumulation_steps
numeric: the step's gradient is about gradient_accumulation_steps (2) times the window's mean
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


class TinyCausalLM(torch.nn.Module):
    def __init__(self, vocab=32, d=8):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d)
        self.head = torch.nn.Linear(d, vocab)

    def forward(self, input_ids, labels=None, **kwargs):
        return {"logits": self.head(torch.tanh(self.embed(input_ids)))}


class NTPTrainer(Trainer):
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        outputs = model(input_ids=inputs["input_ids"])
        logits, labels = outputs["logits"], inputs["labels"]
        # the labels are aligned with the positions (no shift), so the Trainer's num_items_in_batch
        # counts exactly the targets this sum runs over
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)  # BUG
        # FIX: loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="sum") / num_items_in_batch
        return (loss, outputs) if return_outputs else loss


_gb.setup()
model = TinyCausalLM()
_gb.start(model)
train_dataset = _hf.token_dataset([12] * 12)
trainer = NTPTrainer(model=model, args=_hf.args(), train_dataset=train_dataset)
trainer.train()
_gb.done(model)
