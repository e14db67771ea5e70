"""BiST's TGIF-QA training: the loss-compute object backpropagates its loss on every call and only steps and clears when it holds an optimizer, so the test pass run after each epoch (with no optimizer and no `torch.no_grad`) leaves the test set's gradients in the buffers, and they are added to the first training update of the next epoch.

source: salesforce/BiST#2 (https://github.com/salesforce/BiST/issues/2), "Gradient leakage from test dataset of the TGIF_QA": "the gradient on the test set is not cleared during each epoch test, and it will accumulate to the next training [epoch.] ... The usual practice is to wrap it with `torch.no_grad` while validating or testing, or call `optimizer.zero_grad` first before `loss.backward`." The author (henryhungle): "thank you for noting the error ... I updated the code to fix the error with `torch.no_grad`". model/optimize.py was not read: the loss compute follows the issue (backward always, skipped only when gradients are off so that the twin's no_grad pass can run; step then zero_grad only with an optimizer, the step-then-clear order of the annotated-transformer code BiST builds on); the video QA model is reduced to an MLP answer classifier. The twin runs the test pass under torch.no_grad without backward, the author's fix
family: leaked-pass
shape: Adam(lr=1e-3); 3 epochs of 4 training batches of 16, a test pass of 2 batches after each epoch
numeric: the first update of epochs 2 and 3 also applies the summed gradient of the 2 test batches
watch: GG114
lint: GG114
bug-step: 5
"""
import torch
import torch.nn.functional as F

import _gb


class SimpleLossCompute:
    def __init__(self, criterion, opt=None):
        self.criterion, self.opt = criterion, opt

    def __call__(self, logits, y):
        loss = self.criterion(logits, y)
        if self.opt is not None or torch.is_grad_enabled():
            loss.backward()
        if self.opt is not None:
            self.opt.step()
            self.opt.zero_grad()
        return loss.item()


def run_epoch(batches, model, loss_compute):
    return sum(loss_compute(model(x), y) for x, y in batches)


_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(24, 32), torch.nn.ReLU(), torch.nn.Linear(32, 5))
_gb.start(model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
train = [(torch.randn(16, 24), torch.randint(0, 5, (16,))) for _ in range(4)]
test = [(torch.randn(16, 24), torch.randint(0, 5, (16,))) for _ in range(2)]
for epoch in range(3):
    model.train()
    run_epoch(train, model, SimpleLossCompute(torch.nn.CrossEntropyLoss(), optimizer))
    model.eval()
    run_epoch(test, model, SimpleLossCompute(torch.nn.CrossEntropyLoss(), None))  # BUG
    # FIX: with torch.no_grad():
    # FIX:     run_epoch(test, model, SimpleLossCompute(torch.nn.CrossEntropyLoss(), None))
_gb.done(model)
