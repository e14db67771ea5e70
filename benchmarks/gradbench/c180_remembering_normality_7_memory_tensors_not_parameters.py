"""RememberingNormality memory module: the memory keys and values are created with `torch.randn(L, channel).to('cuda')`, plain tensors, not `nn.Parameter`, so they are not module parameters, get no gradient, and stay at their random initialisation while the student around them trains.

source: SimonThomine/RememberingNormality#7 (https://github.com/SimonThomine/RememberingNormality/issues/7), "some questions": "self.keys=torch.randn(L,channel).to('cuda') self.values=torch.randn(L,channel).to('cuda') The code in the module is not wrapped with nn.Parameter(). The parameters do not seem to be recognized as neural networks but remain unchanged as randomly initialized parameters." The author (SimonThomine): "You're right, I cant believe I missed this error ... Fixed in 1d99145". The module was not read beyond the quote: the memory is an attention read of the features over L keys and values; the student is reduced to a small encoder whose memory-augmented features regress a frozen teacher's features. The twin wraps both in nn.Parameter, the author's fix
family: orphan
shape: Adam(lr=1e-3) on model.parameters(); L = 10 memory slots of 16 channels; 8 steps on batches of 32
numeric: the memory keys and values never move (the twin trains them)
watch: out: a tensor that is not a parameter gets no gradient; nothing in the gradient buffers is stale, lost or applied twice
lint: out: whether a tensor is registered as a parameter is decided by how it is wrapped when the module is built, at run time
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class Memory(torch.nn.Module):
    def __init__(self, L, channel):
        super().__init__()
        self.keys = torch.randn(L, channel)  # BUG
        self.values = torch.randn(L, channel)  # BUG
        # FIX: self.keys = torch.nn.Parameter(torch.randn(L, channel))
        # FIX: self.values = torch.nn.Parameter(torch.randn(L, channel))

    def forward(self, q):
        attn = torch.softmax(q @ self.keys.t() / q.shape[-1] ** 0.5, dim=-1)
        return q + attn @ self.values


class Student(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = torch.nn.Sequential(torch.nn.Linear(20, 16), torch.nn.ReLU())
        self.memory = Memory(10, 16)
        self.head = torch.nn.Linear(16, 16)

    def forward(self, x):
        return self.head(self.memory(self.encoder(x)))


_gb.setup()
teacher = torch.nn.Sequential(torch.nn.Linear(20, 16), torch.nn.Tanh()).requires_grad_(False)
student = Student()
_gb.start(student.encoder, student.head, student.memory.keys, student.memory.values)
optimizer = torch.optim.Adam(student.parameters(), lr=1e-3)
for step in range(8):
    x = torch.randn(32, 20)
    loss = F.mse_loss(student(x), teacher(x))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
_gb.done(student.encoder, student.head, student.memory.keys, student.memory.values)
