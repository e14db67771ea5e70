"""TextClassificationBenchmark's main.py: `optimizer.zero_grad()` is called once, before the training loop, so every batch's backward adds to the gradients of all earlier batches and each step applies (after the per-step element-wise clip) the running sum.

source: FreedomIntelligence/TextClassificationBenchmark#20 (https://github.com/FreedomIntelligence/TextClassificationBenchmark/issues/20), the report that the gradients are cleared only once before the loop. main.py was read: the single `optimizer.zero_grad()` precedes the epoch loop, whose body computes the cross-entropy, calls loss.backward(), utils.clip_gradient(optimizer, opt.grad_clip) and optimizer.step(); utils.clip_gradient was not read and is written as the usual element-wise clamp to [-grad_clip, grad_clip]. The text models are reduced to a bag-of-embeddings classifier over a 50-word vocabulary, Adam is kept. The twin clears before each backward
family: missing-clear
shape: Adam(lr=1e-3), grad_clip 0.1 (element-wise clamp), 2 epochs of 4 batches of 16 sentences of 10 words, 3 classes
numeric: step k applies the clamped sum of the k gradients so far
watch: GG101
lint: GG101
bug-step: 2
"""
import torch
import torch.nn.functional as F

import _gb


def clip_gradient(optimizer, grad_clip):
    for group in optimizer.param_groups:
        for param in group["params"]:
            if param.grad is not None:
                param.grad.data.clamp_(-grad_clip, grad_clip)


_gb.setup()
model = torch.nn.Sequential(torch.nn.EmbeddingBag(50, 16), torch.nn.Linear(16, 3))
_gb.start(model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
data = [(torch.randint(0, 50, (16, 10)), torch.randint(0, 3, (16,))) for _ in range(4)]
optimizer.zero_grad()  # BUG
for epoch in range(2):
    for text, label in data:
        # FIX: optimizer.zero_grad()
        predicted = model(text)
        loss = F.cross_entropy(predicted, label)
        loss.backward()
        clip_gradient(optimizer, 0.1)
        optimizer.step()
_gb.done(model)
