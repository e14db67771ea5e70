"""SmartNoise PATECTGAN: the student discriminator's optimizer is never cleared, so each student step re-applies every earlier student gradient and the generator loss's gradient with respect to the student.

source: opendp/smartnoise-sdk#280 (https://github.com/opendp/smartnoise-sdk/issues/280), "PATECTGAN Student loss has no zero_grad": "In the PATECTGAN class, when the backward step is executed (line 280), its optimizer does not execute the function zero_grad(). Both the CTGAN and PATEGAN implementation did execute this function." AprilXiaoyanLiu (maintainer): "Good catch! It's actually a bug. I'm in the process of fixing it" (opendifferentialprivacy/whitenoise-system#283). The teacher ensemble and its noisy votes are reduced to a fixed labelling function; the twin clears the student's optimizer before its backward, as CTGAN and PATEGAN in the same project do
family: missing-clear
shape: for i in range(epochs): for t_3 in range(self.student_iters): fakeact = self._apply_activate(self._generator(fakez)); predictions = pate_votes(fakeact); output = student_disc(fakeact.detach()); loss_s = criterion(output, predictions); loss_s.backward(); optimizer_s.step(). Then the generator: optimizer_g.zero_grad(); gen_out = student_disc(fakeact); loss_g = -torch.mean(gen_out); loss_g.backward(); optimizer_g.step(). Adam for both, 2 student iterations per epoch
numeric: from the second student step on, every student update re-applies all earlier student gradients and the generator losses' gradients with respect to the student
watch: GG101
lint: GG101
bug-step: 2
"""
import torch

import _gb


class Generator(torch.nn.Module):
    def __init__(self, embedding_dim=4, data_dim=6):
        super().__init__()
        self.seq = torch.nn.Sequential(torch.nn.Linear(embedding_dim, 16), torch.nn.ReLU(), torch.nn.Linear(16, data_dim))

    def forward(self, z):
        return self.seq(z)


def pate_votes(fakeact, teacher):
    # the teachers' (noisy) vote, reduced here to one fixed labelling of the generated rows
    with torch.no_grad():
        return (teacher(fakeact) > 0).to(fakeact.dtype)


_gb.setup()
generator = Generator()
student_disc = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.LeakyReLU(0.2), torch.nn.Linear(16, 1))
teacher = torch.nn.Linear(6, 1)
_gb.start(generator, student_disc)
optimizer_g = torch.optim.Adam(generator.parameters(), lr=1e-3, betas=(0.5, 0.9))
optimizer_s = torch.optim.Adam(student_disc.parameters(), lr=1e-3, betas=(0.5, 0.9))
criterion = torch.nn.BCEWithLogitsLoss()
student_iters = 2
for i in range(4):
    for t_3 in range(student_iters):
        fakez = torch.randn(16, 4)
        fakeact = torch.tanh(generator(fakez))
        predictions = pate_votes(fakeact, teacher)
        output = student_disc(fakeact.detach())
        loss_s = criterion(output, predictions)
        # FIX: optimizer_s.zero_grad()
        loss_s.backward()
        optimizer_s.step()
    fakez = torch.randn(16, 4)
    fakeact = torch.tanh(generator(fakez))
    optimizer_g.zero_grad()
    gen_out = student_disc(fakeact)
    loss_g = -torch.mean(gen_out)
    loss_g.backward()
    optimizer_g.step()
_gb.done(generator, student_disc)
