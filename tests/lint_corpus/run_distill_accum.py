"""Knowledge distillation with gradient accumulation: the student's loss is a weighted sum of a
KL divergence (batchmean) and a cross-entropy, divided by the window size before backward."""
import torch
import torch.nn.functional as F
from torch import nn

ACCUM_STEPS, ALPHA, TEMPERATURE = 4, 0.5, 2.0


def train_epoch(student, teacher, loader, optimizer):
    assert len(loader) % ACCUM_STEPS == 0  # whole windows
    for i, (x, y) in enumerate(loader):
        with torch.no_grad():
            t_logits = teacher(x)
        s_logits = student(x)
        kd = F.kl_div(F.log_softmax(s_logits / TEMPERATURE, -1), F.softmax(t_logits / TEMPERATURE, -1),
                      reduction="batchmean") * TEMPERATURE ** 2
        loss = ALPHA * kd + (1 - ALPHA) * F.cross_entropy(s_logits, y)
        loss = loss / ACCUM_STEPS
        loss.backward()
        if (i + 1) % ACCUM_STEPS == 0:
            optimizer.step()
            optimizer.zero_grad()


def main():
    torch.manual_seed(0)
    x = torch.randn(32, 6, dtype=torch.float64)
    y = torch.randint(0, 3, (32,))
    loader = [(x[i : i + 4], y[i : i + 4]) for i in range(0, 32, 4)]
    teacher, student = nn.Linear(6, 3).double(), nn.Linear(6, 3).double()
    optimizer = torch.optim.SGD(student.parameters(), lr=0.5)
    for _ in range(2):
        train_epoch(student, teacher, loader, optimizer)
    return [p.detach().clone() for p in student.parameters()]


if __name__ == "__main__":
    main()
