"""nanoGPT micro-steps, trainer classes whose methods call each other, closures, wrappers."""
import torch


def nanogpt_zero_grad_in_micro_loop(model, get_batch, optimizer, scaler, gradient_accumulation_steps, max_iters):
    for iter_num in range(max_iters):
        for micro_step in range(gradient_accumulation_steps):
            optimizer.zero_grad(set_to_none=True)  # expect: GG102
            X, Y = get_batch("train")
            logits, loss = model(X, Y)
            loss = loss / gradient_accumulation_steps
            scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()


class Trainer:  # a plain class: fit -> train_epoch -> train_step
    def __init__(self, model, optimizer, loss_fn):
        self.model, self.optimizer, self.loss_fn = model, optimizer, loss_fn

    def fit(self, loader, epochs):
        for epoch in range(epochs):
            self.train_epoch(loader)

    def train_epoch(self, loader):
        for batch in loader:
            self.train_step(batch)

    def train_step(self, batch):
        x, y = batch
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        self.optimizer.step()  # expect: GG101
        return loss.item()


def closure_backward(model, loader, loss_fn, optimizer):
    for x, y in loader:
        def _backward():
            loss = loss_fn(model(x), y)
            loss.backward()

        _backward()
        optimizer.step()  # expect: GG101


def lbfgs_closure_without_clearing(model, x, y, loss_fn):
    optimizer = torch.optim.LBFGS(model.parameters())
    for it in range(20):
        def closure():
            loss = loss_fn(model(x), y)
            loss.backward()
            return loss

        optimizer.step(closure)  # expect: GG101


class StepWrapper:
    def __init__(self, optimizer):
        self.inner = optimizer

    def step(self):
        self.inner.step()

    def zero_grad(self):
        self.inner.zero_grad(set_to_none=True)


def step_through_wrapper(model, loader, loss_fn, optimizer):
    wrapper = StepWrapper(optimizer)
    for x, y in loader:
        loss_fn(model(x), y).backward()
        wrapper.step()  # expect: GG101


def rnn_with_zero_hidden(model, batches, loss_fn, optimizer, batch_size, hidden_size):
    for x, y in batches:
        hidden = torch.zeros(1, batch_size, hidden_size)
        mask = torch.zeros_like(y).bool()
        out, hidden = model(x, hidden)
        loss = loss_fn(out[~mask], y[~mask])
        loss.backward()
        optimizer.step()  # expect: GG101


# --- correct: no finding -------------------------------------------------------
def nanogpt(model, get_batch, optimizer, scaler, gradient_accumulation_steps, max_iters):
    for iter_num in range(max_iters):
        for micro_step in range(gradient_accumulation_steps):
            X, Y = get_batch("train")
            logits, loss = model(X, Y)
            loss = loss / gradient_accumulation_steps
            scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)


class GoodTrainer:
    def __init__(self, model, optimizer, loss_fn):
        self.model, self.optimizer, self.loss_fn = model, optimizer, loss_fn

    def fit(self, loader, epochs):
        for epoch in range(epochs):
            self.train_epoch(loader)

    def train_epoch(self, loader):
        for batch in loader:
            self.train_step(batch)

    def train_step(self, batch):
        self.optimizer.zero_grad()
        x, y = batch
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        self.optimizer.step()
        return loss.item()


def lbfgs(model, x, y, loss_fn):
    optimizer = torch.optim.LBFGS(model.parameters())
    for it in range(20):
        def closure():
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            return loss

        optimizer.step(closure)


def timm_style_closure(model, loader, loss_fn, optimizer):
    for x, y in loader:
        def _forward():
            return loss_fn(model(x), y)

        def _backward(_loss):
            optimizer.zero_grad()
            _loss.backward()
            optimizer.step()

        loss = _forward()
        _backward(loss)


def wrapper_cleared(model, loader, loss_fn, optimizer):
    wrapper = StepWrapper(optimizer)
    for x, y in loader:
        wrapper.zero_grad()
        loss_fn(model(x), y).backward()
        wrapper.step()


def rnn(model, batches, loss_fn, optimizer, batch_size, hidden_size):
    for x, y in batches:
        hidden = torch.zeros(1, batch_size, hidden_size)
        optimizer.zero_grad()
        out, hidden = model(x, hidden)
        loss = loss_fn(out, y)
        loss.backward()
        optimizer.step()
