"""LLaMA-Factory's KSFT trainer: the custom loss is a per-micro-batch mean that ignores `num_items_in_batch`, while the HF Trainer sees `model_accepts_loss_kwargs` as True (the model's forward takes **kwargs) and so skips its own division by `gradient_accumulation_steps`; each window applies the sum of its micro-batch means.

source: hiyouga/LlamaFactory#9409 (https://github.com/hiyouga/LlamaFactory/pull/9409), "[train] fix ga scale in ksft loss" (merged): "Set model_accepts_loss_kwargs to False before training, avoiding the absence of gradient accumulation." The KSFT loss and trainer were not read; the custom loss is reduced to a token-mean cross-entropy computed in compute_loss, the language model to an embedding and a linear head (the forward accepting **kwargs, as HF causal LMs do). The PR's fix (model_accepts_loss_kwargs set to False, so the Trainer divides each micro-batch's token mean by gradient_accumulation_steps) makes each step the mean of its micro-batches' token means, not the window's token mean: the micro-batches hold different token counts (20 and 22 in the first window), and the first step's gradient is 3.6 % off the window's token mean (float64, plain autograd on the window's sequences). The twin does that fix right the way the Trainer hands it in: compute_loss sums the token losses and divides by num_items_in_batch (the window's token count), with model_accepts_loss_kwargs left True so the Trainer does not divide again
family: num-items
shape: HF Trainer (SGD lr 0.1, per_device_train_batch_size 2, gradient_accumulation_steps 2, 3 steps); compute_loss returns its micro-batch's token-mean loss
numeric: each step's gradient is gradient_accumulation_steps (2) times the window's mean
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


class KSFTTrainer(Trainer):
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        outputs = model(input_ids=inputs["input_ids"])
        loss = F.cross_entropy(outputs["logits"].flatten(0, 1), inputs["labels"].flatten(), ignore_index=-100)  # BUG
        # FIX: loss = F.cross_entropy(outputs["logits"].flatten(0, 1), inputs["labels"].flatten(), ignore_index=-100, reduction="sum") / num_items_in_batch
        return (loss, outputs) if return_outputs else loss


_gb.setup()
model = TinyCausalLM()
_gb.start(model)
train_dataset = _hf.token_dataset([12, 9, 12, 7, 12, 10, 12, 11, 8, 12, 12, 6])
trainer = KSFTTrainer(model=model, args=_hf.args(), train_dataset=train_dataset)
trainer.train()
_gb.done(model)
