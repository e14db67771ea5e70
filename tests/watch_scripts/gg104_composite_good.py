"""GG104 on a composite loss, fixed: the whole weighted sum divided by accum (the negative control)."""
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
    loss = (alpha * kd + (1 - alpha) * F.cross_entropy(s_logits, labels)) / accum
    loss.backward()
    if (i + 1) % accum == 0:
        optimizer.step()
        optimizer.zero_grad()
