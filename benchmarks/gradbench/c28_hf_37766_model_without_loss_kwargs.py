"""HF Trainer with a model whose forward takes no loss kwargs: the window is a mean of micro-batch means.

source: huggingface/transformers#37766 (https://github.com/huggingface/transformers/issues/37766), "[Trainer] As gradient_accumulation_steps increases, the loss also increases": "If model does not accept loss_kwargs, the loss is not divided by the number of items in the batch, but only by the number of items in a single forward pass ... no error or warning is raised"
family: num-items
shape: a custom token model whose forward(input_ids, labels) returns the token-mean cross-entropy (labels aligned with the positions, so the Trainer's count of labels != -100 is the loss's count) and has no **kwargs, so the Trainer cannot pass num_items_in_batch and divides each micro-batch mean by gradient_accumulation_steps
numeric: micro-batches with few target tokens weigh as much as those with many; the step's gradient is not the window's token mean
watch: GG105
lint: out: the token counts are data, and the Trainer computes the loss scaling inside the framework
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

    def forward(self, input_ids, labels=None):  # BUG
    # FIX: def forward(self, input_ids, labels=None, num_items_in_batch=None, **kwargs):
        logits = self.head(torch.tanh(self.embed(input_ids)))
        if labels is None:
            return {"logits": logits}
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)  # BUG
        # FIX: loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="sum")
        # FIX: loss = loss / num_items_in_batch if num_items_in_batch is not None else loss / (labels != -100).sum()
        return {"loss": loss, "logits": logits}


_gb.setup()
model = TinyCausalLM()
_gb.start(model)
train_dataset = _hf.token_dataset([12, 2, 3, 12, 11, 2, 12, 12, 2, 4, 9, 12])
trainer = Trainer(model=model, args=_hf.args(), train_dataset=train_dataset)
trainer.train()
_gb.done(model)
