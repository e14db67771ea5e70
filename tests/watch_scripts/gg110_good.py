"""GG110 fixed: only the optimizer whose model the loss reaches steps."""
import torch
import torch.nn.functional as F

torch.manual_seed(0)
student = torch.nn.Linear(8, 1)
teacher = torch.nn.Linear(8, 1)
opt_student = torch.optim.SGD(student.parameters(), lr=0.01)
for _ in range(3):
    x = torch.randn(16, 8)
    with torch.no_grad():
        target = teacher(x)
    loss = F.mse_loss(student(x), target)
    loss.backward()
    opt_student.step()
    opt_student.zero_grad()
