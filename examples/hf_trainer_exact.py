"""The HF Trainer made exact: the README's Trainer example, as it runs (a tiny model built from a config).

A GPT-2 of one layer on random token ids, 4 micro-batches of 2 rows per
step, a varying number of leading positions of each row masked with -100 (as
a prompt or padding would be). The stock Trainer counts every label, though
the model's loss never targets position 0: check_trainer measures that and
names the cause; exact(trainer) repairs it. Run: python examples/hf_trainer_exact.py
"""

import tempfile

import torch
import transformers
from gradguard.integrations.transformers import Watch, check_trainer, exact

model = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=100, n_positions=32, n_embd=32, n_layer=1, n_head=2))
rows = []
for i in range(16):
    ids = torch.randint(100, (24,))
    labels = ids.clone()
    labels[: i % 7] = -100  # positions that are no target (a prompt, padding)
    rows.append({"input_ids": ids, "labels": labels})
args = transformers.TrainingArguments(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=2,
                                      gradient_accumulation_steps=4, max_steps=2, report_to=[], use_cpu=True,
                                      save_strategy="no")
trainer = transformers.Trainer(model=model, args=args, train_dataset=rows)

print(check_trainer(trainer))  # NOT equivalent: the Trainer counts position 0, which the shifted loss never targets
trainer = exact(trainer)
print(check_trainer(trainer))  # equivalent (float32 round-off)
trainer.add_callback(Watch(mode="raise"))
trainer.train()
