"""Udacity transfer-learning notebook: the classifier is trained without optimizer.zero_grad().

source: udacity/deep-learning-v2-pytorch#160 (https://github.com/udacity/deep-learning-v2-pytorch/pull/160), "Add zero_grad to Transfer Learning notebook": "We are missing zero_grad in example, which can cause gradients to accumulate" (open PR; the mechanism is checked by running it here)
family: missing-clear
shape: a frozen feature extractor, a new classifier head; for inputs, labels in trainloader: logps = model(inputs); loss = criterion(logps, labels); loss.backward(); optimizer.step() (the optimizer.zero_grad() line is missing)
numeric: every update adds all earlier gradients of the head again
watch: GG101
lint: GG101
bug-step: 2
"""
import torch

import _gb

_gb.setup()
features = torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.ReLU())
for param in features.parameters():
    param.requires_grad = False
classifier = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2), torch.nn.LogSoftmax(dim=1))
model = torch.nn.Sequential(features, classifier)
_gb.start(classifier)
criterion = torch.nn.NLLLoss()
optimizer = torch.optim.Adam(classifier.parameters(), lr=0.003)
trainloader = [(torch.randn(8, 10), torch.randint(0, 2, (8,))) for _ in range(5)]
for inputs, labels in trainloader:
    # FIX: optimizer.zero_grad()
    logps = model(inputs)
    loss = criterion(logps, labels)
    loss.backward()
    optimizer.step()
_gb.done(classifier)
