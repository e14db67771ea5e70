"""DL4Proteins workshop 7: the evaluation loop runs `loss.backward()` and `optimizer.step()` on the test set for 10 epochs, so with `model.eval()` set the model is still trained on the test data before its accuracy is reported.

source: Graylab/DL4Proteins-notebooks#11 (https://github.com/Graylab/DL4Proteins-notebooks/issues/11), "WS07: Evaluation loop trains on the test set": "The evaluation loop calls `loss.backward()` and `optimizer.step()` on the test set for 10 epochs. `model.eval()` changes dropout and batch-normalization behavior, but it does not prevent parameter updates. ... The evaluation loop should not contain `backward()` or `optimizer.step()`." (open). The notebook was not read; the graph network is reduced to an MLP with dropout over fixed-size features, and the 10 evaluation epochs to 2. The twin evaluates once under torch.inference_mode, the issue's proposal
family: leaked-pass
shape: Adam(lr=1e-2), 2 training epochs of 4 batches, then the evaluation loop over 3 test batches for 2 epochs
numeric: the bug takes 6 more optimizer steps on the test batches
watch: out: the test batches are cleared, backpropagated and stepped exactly like training batches; which data a step may train on is the program's intent
lint: out: a clear, backward and step per batch is an ordinary training loop; that the loop runs over the test set is the program's intent
bug-step: 9
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
train = [(torch.randn(8, 10), torch.randint(0, 2, (8,))) for _ in range(4)]
test = [(torch.randn(8, 10), torch.randint(0, 2, (8,))) for _ in range(3)]
model = torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(16, 2))
_gb.start(model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
for epoch in range(2):
    model.train()
    for x, y in train:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
model.eval()
correct = 0
for epoch in range(2):  # BUG
    for x, y in test:  # BUG
        optimizer.zero_grad()  # BUG
        output = model(x)  # BUG
        loss = F.cross_entropy(output, y)  # BUG
        loss.backward()  # BUG
        optimizer.step()  # BUG
        correct += int((output.argmax(1) == y).sum())  # BUG
# FIX: with torch.inference_mode():
# FIX:     for x, y in test:
# FIX:         output = model(x)
# FIX:         loss = F.cross_entropy(output, y)
# FIX:         correct += int((output.argmax(1) == y).sum())
_gb.done(model)
