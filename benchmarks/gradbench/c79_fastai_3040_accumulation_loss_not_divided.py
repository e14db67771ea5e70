"""fastai GradientAccumulation callback: the micro-batch losses are summed without being divided, so each step is n_acc/bs times the mean.

source: fastai/fastai#3040 (https://github.com/fastai/fastai/pull/3040), "Fixed lr too high for gradient accumulation fixed #3023" (merged): "We were not dividing by the number of batches to accumulate, so this effectively increasing the learning rate"; issue fastai/fastai#3023: "We do not scale the loss by number of batches to accumulate"
family: unscaled
shape: class GradientAccumulation(Callback): before_fit: self.count = 0; after_backward: self.count += find_bs(self.learn.yb); if self.count < self.n_acc: raise CancelBatchException() (skips the step and the zero_grad); else self.count = 0. The Learner's one_batch: pred = model(xb); loss_grad = loss_func(pred, yb); loss_grad.backward(); step; zero_grad. Fixed: after_loss divides loss_grad by n_acc / bs
numeric: with n_acc = 32 and batches of 8, each step's gradient is 4 times the mean of its 32 samples
watch: GG104
lint: GG104
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class CancelBatchException(Exception):
    pass


class GradientAccumulation:
    "Accumulate gradients before updating weights"

    def __init__(self, n_acc=32):
        self.n_acc = n_acc

    def before_fit(self, learn):
        self.count = 0

    # FIX: def after_loss(self, learn):
    # FIX:     learn.loss_grad = learn.loss_grad / (self.n_acc / learn.yb.shape[0])

    def after_backward(self, learn):
        self.count += learn.yb.shape[0]
        if self.count < self.n_acc:
            raise CancelBatchException()
        self.count = 0


class Learner:
    def __init__(self, model, loss_func, lr, cbs):
        self.model, self.loss_func, self.cbs = model, loss_func, cbs
        self.opt = torch.optim.SGD(model.parameters(), lr=lr)

    def callback(self, event):
        for cb in self.cbs:
            if hasattr(cb, event):
                getattr(cb, event)(self)

    def one_batch(self, xb, yb):
        self.xb, self.yb = xb, yb
        try:
            pred = self.model(xb)
            self.loss_grad = self.loss_func(pred, yb)
            self.callback("after_loss")
            self.loss_grad.backward()
            self.callback("after_backward")
            self.opt.step()
            self.opt.zero_grad()
        except CancelBatchException:
            pass

    def fit(self, batches):
        self.callback("before_fit")
        for xb, yb in batches:
            self.one_batch(xb, yb)


_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.ReLU(), torch.nn.Linear(12, 3))
_gb.start(model)
learn = Learner(model, F.cross_entropy, lr=0.1, cbs=[GradientAccumulation(n_acc=32)])
batches = [(x, (x[:, 0] > 0).long() + (x[:, 1] > 0).long()) for x in (torch.randn(8, 6) for _ in range(12))]
learn.fit(batches)
_gb.done(model)
