"""FlowModels LADD notebook: the student's adversarial loss goes through the discriminator, and only the student optimizer is cleared after the student step (`student_optimizer.zero_grad()`), so the discriminator's gradient from the student loss stays in its `.grad` and is applied by the discriminator's next step together with its own loss's gradient.

source: leffff/FlowModels#3 (https://github.com/leffff/FlowModels/issues/3), "student_loss.backward() in LADD": "student_loss.backward(); torch.nn.utils.clip_grad_norm_(student_unet.parameters(), 1.0); student_optimizer.step(); student_scheduler.step(); student_optimizer.zero_grad(). Wouldn't above code generate gradients on the discriminator as well? Then in the next training iter, those gradients on the discriminator will be used to in optimizer.step. I think we need a discriminator_optimizer.zero_grad() after student_optimizer.zero_grad()?" The author (leffff): "This may be true! not sure yet." The notebook was not read beyond the quoted lines: each iteration does the student step as quoted, then the discriminator step (loss on real and detached student samples, backward, step, zero_grad after the step); the UNets are reduced to MLPs, the flow-matching distillation to a regression on a teacher's output plus the adversarial term, schedulers left out. The twin adds discriminator_optimizer.zero_grad() after student_optimizer.zero_grad(), as the issue proposes
family: gan-stale
shape: student Adam(lr=1e-3), discriminator Adam(lr=1e-3); clip 1.0 on the student; 5 iterations
numeric: every discriminator step also applies the student loss's gradient (which pushes D towards the student)
watch: out: the leaked gradient was never applied by an earlier step (not stale); the watch has no rule for a gradient from another model's loss
lint: out: clearing after each step is the correct pattern in general; telling which loss should reach the discriminator needs the data flow
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
teacher = torch.nn.Sequential(torch.nn.Linear(8, 8))
student_unet = torch.nn.Sequential(torch.nn.Linear(9, 32), torch.nn.SiLU(), torch.nn.Linear(32, 8))
discriminator = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.SiLU(), torch.nn.Linear(32, 1))
teacher.requires_grad_(False)
_gb.start(student_unet, discriminator)
student_optimizer = torch.optim.Adam(student_unet.parameters(), lr=1e-3)
discriminator_optimizer = torch.optim.Adam(discriminator.parameters(), lr=1e-3)
for it in range(5):
    x_0 = torch.randn(16, 8)
    t = torch.rand(16, 1)
    x_1_approx = student_unet(torch.cat([x_0, t], 1))
    adv = F.softplus(-discriminator(x_1_approx)).mean()
    student_loss = F.mse_loss(x_1_approx, teacher(x_0)) + 0.5 * adv
    student_loss.backward()
    torch.nn.utils.clip_grad_norm_(student_unet.parameters(), 1.0)
    student_optimizer.step()
    student_optimizer.zero_grad()
    # FIX: discriminator_optimizer.zero_grad()
    real = teacher(torch.randn(16, 8))
    d_loss = F.softplus(-discriminator(real)).mean() + F.softplus(discriminator(x_1_approx.detach())).mean()
    d_loss.backward()
    discriminator_optimizer.step()
    discriminator_optimizer.zero_grad()
_gb.done(student_unet, discriminator)
