"""nanoGPT train.py: the micro-step losses of a gradient-accumulation window are backpropagated undivided, so each step's gradient is K times the window's mean and `grad_clip = 1.0` clips a gradient K times too large (the effective clip threshold is K times lower).

source: karpathy/nanoGPT#168 (https://github.com/karpathy/nanoGPT/issues/168), "Should `loss` be divided by `gradient_accumulation_steps`?": "I notice that loss is NOT divided by gradient_accumulation_steps before backward" (train.py#L281-L293 at ae3a8d5). The author (karpathy): "You're right it should be, I'll issue a fix ... Adam is scale invariant ... Other parts of the loop would be impacted though, e.g. especially gradient clipping ... our gradient clip value is silently lower by a factor of gradient_accumulation_steps." Fixed in 553f949 (via #206/#207: loss = loss / gradient_accumulation_steps). The loop as quoted: for micro_step in range(gradient_accumulation_steps): with ctx: logits, loss = model(X, Y); X, Y = get_batch('train'); scaler.scale(loss).backward(); then if grad_clip != 0.0: scaler.unscale_(optimizer); clip_grad_norm_(model.parameters(), grad_clip); scaler.step(optimizer); scaler.update(); optimizer.zero_grad(set_to_none=True). The GPT is reduced to a tiny character model; the scaler is disabled as it is for float32/bfloat16 (enabled=(dtype == 'float16')). The twin divides as the fix does
family: unscaled
shape: as quoted; gradient_accumulation_steps = 4, grad_clip = 1.0, AdamW(lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1), 6 iterations, cross-entropy over a 16-symbol vocabulary
numeric: every step's gradient is 4 times the window mean before the clip at 1.0, so the clipped direction and the Adam update differ from the full batch's
watch: GG104
lint: GG104
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

gradient_accumulation_steps = 4
grad_clip = 1.0
vocab, block = 16, 8


class GPT(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = torch.nn.Embedding(vocab, 24)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(24, 48), torch.nn.GELU(), torch.nn.Linear(48, 24))
        self.lm_head = torch.nn.Linear(24, vocab)

    def forward(self, idx, targets):
        x = self.wte(idx)
        logits = self.lm_head(x + self.mlp(x))
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


data = None


def get_batch(split):
    ix = torch.randint(len(data) - block - 1, (4,))
    x = torch.stack([data[i:i + block] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + block] for i in ix])
    return x, y


_gb.setup()
data = torch.randint(0, vocab, (400,))
model = GPT()
_gb.start(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1)
scaler = torch.amp.GradScaler("cpu", enabled=False)
X, Y = get_batch("train")
for iter_num in range(6):
    for micro_step in range(gradient_accumulation_steps):
        logits, loss = model(X, Y)
        # FIX: loss = loss / gradient_accumulation_steps
        X, Y = get_batch("train")
        scaler.scale(loss).backward()
    if grad_clip != 0.0:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
_gb.done(model)
