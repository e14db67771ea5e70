"""Distillation loop whose loss is not normalised by the accumulation steps.

source: agokrani/distillKitPlus#5 (https://github.com/agokrani/distillKitPlus/issues/5), "Normalize Loss by Gradient Accumulation Steps Absent": the reported loss scales linearly with gradient_accumulation_steps
family: unscaled
shape: KD loss = alpha * KL(student || teacher) + (1 - alpha) * CE, back-propagated for every micro-batch and stepped every gradient_accumulation_steps, never divided
numeric: the step's gradient is gradient_accumulation_steps (8) times the window mean
watch: GG104
lint: GG104
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
teacher = torch.nn.Linear(10, 6)
student = torch.nn.Linear(10, 6)
teacher.requires_grad_(False)
optimizer = torch.optim.SGD(student.parameters(), lr=0.05)
_gb.start(student)
gradient_accumulation_steps, alpha, temperature = 8, 0.5, 2.0
for step in range(16):
    x, labels = torch.randn(4, 10), torch.randint(0, 6, (4,))
    s_logits, t_logits = student(x), teacher(x)
    kd = F.kl_div(F.log_softmax(s_logits / temperature, -1), F.softmax(t_logits / temperature, -1),
                  reduction="batchmean") * temperature ** 2
    loss = alpha * kd + (1 - alpha) * F.cross_entropy(s_logits, labels)
    # FIX: loss = loss / gradient_accumulation_steps
    loss.backward()
    if (step + 1) % gradient_accumulation_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
_gb.done(student)
