"""HF Trainer with a stock GPT-2: num_items_in_batch counts label position 0, which the shifted loss never predicts.

source: huggingface/transformers#46204 (https://github.com/huggingface/transformers/pull/46204), "Fix `num_items_in_batch` over-counting for causal LM losses": the denominator is too large by num_rows per micro-batch; the fix keys on model.loss_type, which a stock GPT2LMHeadModel config leaves unset
family: num-items
shape: Trainer(GPT2LMHeadModel, gradient_accumulation_steps=2) on labels == input_ids; the Trainer counts labels != -100 over all positions
numeric: every gradient is scaled by (targets) / (targets + rows): about 10 % too small here, more for short sequences
watch: out: a uniform scale error of a few percent; the counts are right per micro-batch, only the Trainer's denominator is off
lint: out: nothing in the user's code is wrong
trainer: yes
bug-step: 1
"""
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer

import _gb
import _hf

_gb.setup()
config = GPT2Config(vocab_size=32, n_positions=16, n_embd=16, n_layer=1, n_head=2,
                    resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
model = GPT2LMHeadModel(config).to(torch.get_default_dtype())
# FIX: model.loss_type = "ForCausalLM"
_gb.start(model)
train_dataset = _hf.token_dataset([12, 5, 8, 12, 3, 12, 7, 12, 12, 4, 6, 9])
trainer = Trainer(model=model, args=_hf.args(learning_rate=0.05), train_dataset=train_dataset)
trainer.train()
_gb.done(model)
