"""GG104 on a composite loss: distillation's alpha * KL(batchmean) + (1 - alpha) * CE, never divided by accum.

Both terms are means over the micro-batch, so their weighted sum is one too:
four of them summed into a step give four times the window's mean gradient.
"""
import torch
import torch.nn.functional as F

torch.manual_seed(0)
student, teacher = torch.nn.Linear(10, 6), torch.nn.Linear(10, 6)
teacher.requires_grad_(False)
optimizer = torch.optim.SGD(student.parameters(), lr=0.05)
accum, alpha, temperature = 4, 0.5, 2.0
for i in range(8):
    x, labels = torch.randn(8, 10), torch.randint(0, 6, (8,))
    s_logits, t_logits = student(x), teacher(x)
    kd = F.kl_div(F.log_softmax(s_logits / temperature, -1), F.softmax(t_logits / temperature, -1),
                  reduction="batchmean") * temperature ** 2
    loss = alpha * kd + (1 - alpha) * F.cross_entropy(s_logits, labels)
    loss.backward()  # BUG: not divided by accum
    if (i + 1) % accum == 0:
        optimizer.step()
        optimizer.zero_grad()
