"""Attention-Augmented-Conv2d: the relative-position embeddings `key_rel_w` and `key_rel_h` are created as `nn.Parameter(torch.randn(...))` inside `relative_logits`, i.e. at every forward pass, so they are not among the module's parameters when the optimizer is built: each forward draws fresh random embeddings, their gradients are computed and dropped, and the relative-position term is never learned (it only injects noise into the attention the learned weights are trained against).

source: leaderj1001/Attention-Augmented-Conv2d#7 (https://github.com/leaderj1001/Attention-Augmented-Conv2d/issues/7), "Problems of Parameter registration": "if you register your Parameters here, it can not be correctly optimized ... your optimizer takes `model.named_parameters()` and the `optimizer.step()` and `optimizer.zero_grad()` will ignore your `key_rel_w` and `key_rel_h` because they are not in the `model.named_parameters()`. [Through the gradients will be calculated normally when loss.backward() is called.]" The author: "I have solved this problem by declaring nn.Parameter () when doing __init__." attention_augmented_conv.py was not read: the case follows the issue (two embeddings created in `relative_logits`); the 2-D augmented convolution is reduced to 1-D self-attention over 8 positions with relative logits along the sequence, followed by a classifier. The twin declares both embeddings in `__init__`, the author's fix
family: orphan
shape: Adam(lr=1e-3); 6 steps on batches of 16 sequences of 8 positions
numeric: the relative embeddings are re-drawn at every forward and never trained; the attention and classifier weights train against noise
watch: GG106
lint: out: where a parameter is created (in __init__ or in forward) and whether an optimizer ever holds it are decided when the module runs
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class RelativeSelfAttention(torch.nn.Module):
    def __init__(self, dim=12, length=8):
        super().__init__()
        self.dim, self.length = dim, length
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.out = torch.nn.Linear(dim, 4)
        # FIX: self.key_rel_w = torch.nn.Parameter(torch.randn(2 * length - 1, dim))
        # FIX: self.key_rel_h = torch.nn.Parameter(torch.randn(2 * length - 1, dim))

    def relative_logits(self, q):
        key_rel_w = torch.nn.Parameter(torch.randn(2 * self.length - 1, self.dim))  # BUG
        key_rel_h = torch.nn.Parameter(torch.randn(2 * self.length - 1, self.dim))  # BUG
        # FIX: key_rel_w, key_rel_h = self.key_rel_w, self.key_rel_h
        idx = torch.arange(self.length)
        rel = idx[None, :] - idx[:, None] + self.length - 1
        return (torch.einsum("bid,ijd->bij", q, key_rel_w[rel]) + torch.einsum("bid,ijd->bij", q, key_rel_h[rel])) / 2

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, -1)
        logits = q @ k.transpose(1, 2) + self.relative_logits(q)
        attn = torch.softmax(logits / self.dim ** 0.5, -1)
        return self.out((attn @ v).mean(1))


_gb.setup()
data = [(torch.randn(16, 8, 12), torch.randint(0, 4, (16,))) for _ in range(6)]
model = RelativeSelfAttention()
_gb.start(model.qkv, model.out)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for x, y in data:
    optimizer.zero_grad()
    F.cross_entropy(model(x), y).backward()
    optimizer.step()
_gb.done(model.qkv, model.out)
