"""Zero findings on correct training loops (SPEC §2: a rule never fires on correct code).

Each loop is a compact copy of the shape of a well-known correct loop. Every
test also runs a one-line mutation of the same loop and expects a finding, so
that a watch that saw nothing at all could not pass.
"""

import sys

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import gradguard as gg
from _findings import codes



# --------------------------------------------------------------- MNIST example
class MnistNet(nn.Module):
    """The CNN of pytorch/examples mnist/main.py, shrunk."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, 1)
        self.conv2 = nn.Conv2d(4, 8, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.fc1 = nn.Linear(8 * 5 * 5, 16)
        self.fc2 = nn.Linear(16, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = self.dropout1(x)
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        return F.log_softmax(self.fc2(x), dim=1)


def mnist_loop(zero_grad=True):
    torch.manual_seed(0)
    model = MnistNet()
    optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)
    data = [(torch.randn(8, 1, 14, 14), torch.randint(0, 10, (8,))) for _ in range(4)]
    for epoch in range(2):
        model.train()
        for x, target in data:
            if zero_grad:
                optimizer.zero_grad()
            loss = F.nll_loss(model(x), target)
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            sum(F.nll_loss(model(x), t, reduction="sum").item() for x, t in data)
        scheduler.step()


@pytest.mark.slow  # trains the MNIST example
def test_mnist_example_loop_is_clean():
    with gg.watch(mode="raise") as w:
        mnist_loop()
    assert w.findings == []
    with gg.watch(mode="record") as w:
        mnist_loop(zero_grad=False)
    assert codes(w) == ["GG101"]


# --------------------------------------------------------------- nanoGPT-style
class TinyGPT(nn.Module):
    def __init__(self, vocab=32, dim=16, block=8):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(block, dim)
        layer = nn.TransformerEncoderLayer(dim, 2, 32, dropout=0.1, batch_first=True, norm_first=True)
        self.h = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying, as in nanoGPT

    def forward(self, idx, targets=None):
        t = idx.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(t)
        x = self.wte(idx) + self.wpe(torch.arange(t))
        logits = self.lm_head(self.ln_f(self.h(x, mask=mask, is_causal=True)))
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss


def nanogpt_loop(divide=True, iters=3, accum=4):
    torch.manual_seed(0)
    model = TinyGPT()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}], lr=1e-3)
    scaler = torch.amp.GradScaler("cpu", enabled=False)  # nanoGPT keeps the scaler call with float32
    batches = iter([(torch.randint(0, 32, (4, 8)), torch.randint(0, 32, (4, 8))) for _ in range(iters * accum + 1)])
    x, y = next(batches)
    for it in range(iters):
        for micro_step in range(accum):
            _, loss = model(x, y)
            if divide:
                loss = loss / accum  # scale the loss to account for gradient accumulation
            x, y = next(batches)  # prefetch, as nanoGPT does
            scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)


@pytest.mark.slow  # trains a small GPT
def test_nanogpt_style_accumulation_is_clean():
    with gg.watch(mode="raise") as w:
        nanogpt_loop()
    assert w.findings == []
    with gg.watch(mode="record") as w:
        nanogpt_loop(divide=False)
    assert codes(w) == ["GG104"]


# --------------------------------------------------------------- DCGAN
class Gen(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(nn.Linear(4, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 8), nn.Tanh())

    def forward(self, z):
        return self.main(z)


class Disc(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.LeakyReLU(0.2), nn.Linear(16, 1), nn.Sigmoid())

    def forward(self, x):
        return self.main(x).view(-1)


def dcgan_loop(zero_d=True, iters=3):
    """The update of pytorch/examples dcgan/main.py."""
    torch.manual_seed(0)
    netG, netD = Gen(), Disc()
    criterion = nn.BCELoss()
    optimizerD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
    optimizerG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
    for _ in range(iters):
        real = torch.randn(16, 8)
        # (1) Update D: maximize log(D(x)) + log(1 - D(G(z)))
        if zero_d:
            netD.zero_grad()
        label = torch.full((16,), 1.0)
        errD_real = criterion(netD(real), label)
        errD_real.backward()
        fake = netG(torch.randn(16, 4))
        label.fill_(0.0)
        errD_fake = criterion(netD(fake.detach()), label)
        errD_fake.backward()
        optimizerD.step()
        # (2) Update G: maximize log(D(G(z))); this pass also fills netD's .grad
        netG.zero_grad()
        label.fill_(1.0)
        errG = criterion(netD(fake), label)
        errG.backward()
        optimizerG.step()


@pytest.mark.slow
def test_dcgan_loop_is_clean():
    with gg.watch(mode="raise") as w:
        dcgan_loop()
    assert w.findings == []
    with gg.watch(mode="record") as w:
        dcgan_loop(zero_d=False)
    assert codes(w) == ["GG101"]  # D then steps on the generator pass's leftovers too


# --------------------------------------------------------------- word_language_model
class RNNModel(nn.Module):
    def __init__(self, ntoken=20, ninp=8, nhid=8):
        super().__init__()
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid)
        self.decoder = nn.Linear(nhid, ntoken)

    def forward(self, x, hidden):
        output, hidden = self.rnn(self.encoder(x), hidden)
        return F.log_softmax(self.decoder(output), dim=-1), hidden


def word_lm_loop(zero_grad=True):
    """pytorch/examples word_language_model/main.py: manual SGD, no torch.optim."""
    torch.manual_seed(0)
    model = RNNModel()
    criterion = nn.NLLLoss()
    lr, hidden = 1.0, None
    for _ in range(4):
        data, targets = torch.randint(0, 20, (5, 2)), torch.randint(0, 20, (10,))
        if hidden is not None:
            hidden = tuple(h.detach() for h in hidden)  # repackage_hidden
        if zero_grad:
            model.zero_grad()
        output, hidden = model(data, hidden)
        loss = criterion(output.view(-1, 20), targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)


@pytest.mark.slow
def test_word_language_model_manual_sgd_is_clean():
    with gg.watch(mode="raise") as w:
        word_lm_loop()
    assert w.findings == []
    # Without zero_grad, each hand-written update adds the earlier gradients again: stale.
    with gg.watch(mode="record") as w:
        word_lm_loop(zero_grad=False)
    assert codes(w) == ["GG101"]


# --------------------------------------------------------------- Accumulator
def accumulator_loop(flush=True, sizes=(5, 3, 8, 2, 7, 4, 6)):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    acc = gg.Accumulator(opt, steps=3, scheduler=sched, max_grad_norm=1.0)
    for n in sizes:
        x, y = torch.randn(n, 4), torch.randn(n, 1)
        acc.backward(F.mse_loss(model(x), y), count=n)
        acc.step()
    if flush:
        acc.flush()
    return acc


def test_accumulator_is_clean():
    with gg.watch(mode="raise") as w:
        accumulator_loop()
        accumulator_loop(sizes=(4,) * 6)
    assert w.findings == []
    with gg.watch(mode="record") as w:
        accumulator_loop(flush=False)  # the partial window of 1 micro-batch is never applied
    assert codes(w) == ["GG103"]


def test_accumulator_count_none_and_sum_reduction_are_clean():
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    with gg.watch(mode="raise") as w:
        acc = gg.Accumulator(opt, steps=2)
        for n in (4, 4, 4, 4):
            x, y = torch.randn(n, 4), torch.randn(n, 1)
            acc.backward(F.mse_loss(model(x), y))  # count=None, equal sizes: equal weights are exact
            acc.step()
        acc = gg.Accumulator(opt, steps=2, set_to_none=False)
        for n in (3, 5, 2, 6):
            x, y = torch.randn(n, 4), torch.randn(n, 1)
            acc.backward(F.mse_loss(model(x), y, reduction="sum"), count=n, reduction="sum")
            acc.step()
        acc = gg.Accumulator(opt, steps=2)
        for n in (3, 5, 2, 6):
            x, y = torch.randn(n, 4), torch.randn(n, 1)
            acc.backward(F.mse_loss(model(x), y), count=n)  # counted: exact weights
            acc.step()
    assert w.findings == []


def test_accumulator_without_counts_over_unequal_sizes_is_a_mean_of_means():
    # count=None weighs micro-batches equally: with different item counts that is GG105,
    # exactly as for a plain loss / steps.
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gg.watch(mode="record") as w:
        acc = gg.Accumulator(opt, steps=2)
        for n in (3, 5, 2, 6):
            x, y = torch.randn(n, 4), torch.randn(n, 1)
            acc.backward(F.mse_loss(model(x), y)); line = sys._getframe().f_lineno  # noqa: E702
            acc.step()
    assert codes(w) == ["GG105"]
    assert w.findings[0].line == line and "(3, 5)" in w.findings[0].message


def test_uncounted_accumulator_mark_gets_gg105_counted_does_not():
    # The watch's side of the mark, without the Accumulator: accumulator_backward(counted=...).
    from gradguard._channel import accumulator_backward

    def run(counted):
        torch.manual_seed(0)
        model = nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        with gg.watch(mode="record") as w:
            for n in (3, 5):
                x, y = torch.randn(n, 4), torch.randn(n, 1)
                with accumulator_backward(counted=counted):
                    (F.mse_loss(model(x), y) * 0.5).backward()  # not scaled exactly: GG104 is never claimed
            opt.step()
        return codes(w)

    assert run(counted=False) == ["GG105"]
    assert run(counted=True) == []


def _accumulator_with_zero_grad(leftover, n=12, nan_at=()):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    acc = gg.Accumulator(opt, steps=4, nonfinite="skip")
    refused = []
    with gg.watch(mode="record") as w:
        for i in range(n):
            x, y = torch.randn(2 + i % 3, 4), torch.randn(2 + i % 3, 1)
            if leftover:
                opt.zero_grad(); line = sys._getframe().f_lineno  # noqa: E702
            loss = F.mse_loss(model(x), y)
            if i in nan_at:
                loss = loss * float("nan")
            acc.backward(loss, count=len(x))
            try:
                acc.step()
            except gg.GradguardError as exc:  # the Accumulator refuses the window too (and drops it)
                refused.append((i, str(exc)))
    return w, (line if leftover else None), refused


def test_leftover_zero_grad_with_the_accumulator_is_discarded_gradient():
    w, line, refused = _accumulator_with_zero_grad(leftover=True)
    # Reported at the clearing, the first time it throws a pending window away (the second micro-batch).
    assert codes(w) == ["GG102"] and w.findings[0].line == line and w.findings[0].step == 1
    assert "Accumulator's backward pass" in w.findings[0].detail
    assert refused and refused[0][0] == 3 and "was replaced by another tensor" in refused[0][1]
    assert _accumulator_with_zero_grad(leftover=False)[0].findings == []
    # Windows the Accumulator drops on purpose (a NaN loss with nonfinite="skip") are its own clearing.
    w, *_ = _accumulator_with_zero_grad(leftover=False, n=16, nan_at={1, 5, 9, 13})
    assert w.findings == []


def test_accumulator_resumed_mid_window_is_clean():
    # load_state_dict replaces .grad wholesale (inside the Accumulator's clearing mark).
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    acc = gg.Accumulator(opt, steps=4)
    with gg.watch(mode="raise") as w:
        for i in range(14):
            x, y = torch.randn(4, 4), torch.randn(4, 1)
            acc.backward(F.mse_loss(model(x), y), count=4)
            acc.step()
            if i % 3 == 1:
                acc.load_state_dict(acc.state_dict())
        acc.flush()
    assert w.findings == []


# --------------------------------------------------------------- more correct shapes
def test_lbfgs_closure_is_clean():
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    opt = torch.optim.LBFGS(model.parameters(), max_iter=5)
    x, y = torch.randn(16, 3), torch.randn(16, 1)

    def closure():
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        return loss

    with gg.watch(mode="raise") as w:
        for _ in range(3):
            opt.step(closure)
    assert w.findings == []


def test_two_losses_two_backward_calls_is_clean():
    # A multi-task loss back-propagated in two calls is a sum on purpose, not accumulation.
    torch.manual_seed(0)
    trunk, head_a, head_b = nn.Linear(4, 8), nn.Linear(8, 1), nn.Linear(8, 2)
    params = [*trunk.parameters(), *head_a.parameters(), *head_b.parameters()]
    opt = torch.optim.SGD(params, lr=0.1)
    with gg.watch(mode="raise") as w:
        for _ in range(3):
            opt.zero_grad()
            h = trunk(torch.randn(8, 4))
            F.mse_loss(head_a(h), torch.randn(8, 1)).backward(retain_graph=True)
            F.cross_entropy(head_b(h), torch.randint(0, 2, (8,))).backward()
            opt.step()
    assert w.findings == []


def test_frozen_backbone_and_manual_zero_are_clean():
    torch.manual_seed(0)
    backbone, head = nn.Linear(4, 8), nn.Linear(8, 1)
    backbone.requires_grad_(False)
    opt = torch.optim.SGD(head.parameters(), lr=0.1, momentum=0.9)
    with gg.watch(mode="raise") as w:
        for i in range(4):
            F.mse_loss(head(backbone(torch.randn(8, 4))), torch.randn(8, 1)).backward()
            opt.step()
            for p in head.parameters():  # clearing by hand, in place
                p.grad.zero_()
    assert w.findings == []


@pytest.mark.slow
def test_validation_pass_and_eval_are_clean():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with gg.watch(mode="raise") as w:
        for _ in range(3):
            model.train()
            opt.zero_grad(set_to_none=False)
            F.mse_loss(model(torch.randn(8, 4)), torch.randn(8, 1)).backward()
            opt.step()
            model.eval()
            with torch.no_grad():
                model(torch.randn(8, 4))
    assert w.findings == []


def test_losses_of_one_forward_backpropagated_in_a_loop_are_clean():
    # Several losses sharing one graph, back-propagated one by one (retain_graph until the last).
    torch.manual_seed(0)
    trunk, heads = nn.Linear(4, 8), nn.ModuleList(nn.Linear(8, 1) for _ in range(3))
    opt = torch.optim.SGD([*trunk.parameters(), *heads.parameters()], lr=0.1)
    with gg.watch(mode="raise") as w:
        for _ in range(3):
            opt.zero_grad()
            h = trunk(torch.randn(8, 4))
            losses = [F.mse_loss(head(h), torch.randn(8, 1)) for head in heads]
            for i, loss in enumerate(losses):
                loss.backward(retain_graph=i < len(losses) - 1)
            opt.step()
    assert w.findings == []


@pytest.mark.slow
def test_reentrant_checkpointing_is_one_pass():
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    block = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU())
    head = nn.Linear(8, 1)
    opt = torch.optim.SGD([*block.parameters(), *head.parameters()], lr=0.1)
    with gg.watch(mode="raise") as w:
        for _ in range(3):
            opt.zero_grad()
            x = torch.randn(8, 4, requires_grad=True)
            F.mse_loss(head(checkpoint(block, x, use_reentrant=True)), torch.randn(8, 1)).backward()
            opt.step()
    assert w.findings == []
    with gg.watch(mode="record") as w:  # the nested backward must not hide the outer loop's bug
        for _ in range(2):
            x = torch.randn(8, 4, requires_grad=True)
            F.mse_loss(head(checkpoint(block, x, use_reentrant=True)), torch.randn(8, 1)).backward()
            opt.step()
    assert [f.code for f in w.findings] == ["GG101"]


def test_grad_scaler_skipping_an_overflowing_step_is_clean():
    # GradScaler.step() unscales, finds inf and skips optimizer.step(); the loop then clears.
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    skipped = 0
    with gg.watch(mode="raise") as w:
        for i in range(4):
            x = torch.randn(8, 4) * (1e36 if i == 1 else 1.0)  # the second batch overflows
            loss = F.mse_loss(model(x), torch.randn(8, 1))
            scaler.scale(loss).backward()
            before = scaler.get_scale()
            scaler.step(opt)
            scaler.update()
            skipped += scaler.get_scale() < before
            opt.zero_grad()
    assert skipped == 1
    assert w.findings == []


def test_grad_scaler_accumulation_is_judged_without_the_scale():
    # scaler.scale(loss / accum): the scaler's factor is divided back out before the step.
    def run(divide):
        torch.manual_seed(0)
        model = nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cpu")
        with gg.watch(mode="record") as w:
            for i in range(8):
                loss = F.mse_loss(model(torch.randn(8, 4)), torch.randn(8, 1))
                scaler.scale(loss / 4 if divide else loss).backward()
                if (i + 1) % 4 == 0:
                    scaler.step(opt)
                    scaler.update()
                    opt.zero_grad()
        return [f.code for f in w.findings]

    assert run(divide=True) == []
    assert run(divide=False) == ["GG104"]


def test_a_pass_seeded_with_the_accumulation_weight_is_read_as_the_division():
    # loss.backward(torch.tensor(1 / 4)) is (loss / 4).backward(): the seed is the weight.
    def run(seed):
        torch.manual_seed(0)
        model = nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        with gg.watch(mode="record") as w:
            for i in range(8):
                loss = F.mse_loss(model(torch.randn(8, 4)), torch.randn(8, 1))
                loss.backward(torch.tensor(seed))
                if (i + 1) % 4 == 0:
                    opt.step()
                    opt.zero_grad()
        return [f.code for f in w.findings]

    assert run(1 / 4) == []
    assert run(1.0) == ["GG104"]  # negative control: seeded with 1, the loss is not divided


# --------------------------------------------------------------- SAM
def test_sam_two_pass_update_is_not_discarded_gradient():
    # Sharpness-aware minimisation: backward, perturb the weights along p.grad, zero_grad,
    # second backward at the perturbed point, restore, step.
    def sam_loop(perturb=True, second_pass=True, rho=0.05):
        torch.manual_seed(0)
        m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
        base = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        with gg.watch(mode="record") as w:
            for _ in range(6):
                x, y = torch.randn(8, 4), torch.randn(8, 1)
                F.mse_loss(m(x), y).backward()
                with torch.no_grad():
                    norm = torch.nn.utils.get_total_norm([p.grad for p in m.parameters()])
                    eps = [p.grad * (rho / (norm + 1e-12)) for p in m.parameters()]
                    if perturb:
                        for p, e in zip(m.parameters(), eps):
                            p.add_(e)
                base.zero_grad()
                if second_pass:
                    F.mse_loss(m(x), y).backward()
                with torch.no_grad():
                    if perturb:
                        for p, e in zip(m.parameters(), eps):
                            p.sub_(e)
                base.step()
                base.zero_grad()
        return codes(w)

    assert sam_loop() == []
    assert sam_loop(perturb=False) == []  # the step is fed by the second backward line
    assert sam_loop(perturb=False, second_pass=False) == ["GG102"]  # the mutation: nothing feeds the step


class SAM(torch.optim.Optimizer):
    """The usual SAM wrapper (a base optimizer inside; step(closure) calls the base's step)."""

    def __init__(self, params, base_optimizer, rho=0.05, zero_first=True, **kwargs):
        super().__init__(params, dict(rho=rho, **kwargs))
        self.base_optimizer = base_optimizer(self.param_groups, **kwargs)
        self.param_groups = self.base_optimizer.param_groups
        self.zero_first = zero_first

    @torch.no_grad()
    def first_step(self, zero_grad=False):
        norm = torch.norm(torch.stack([p.grad.norm() for g in self.param_groups for p in g["params"] if p.grad is not None]))
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self.state[p]["old_p"] = p.data.clone()
                    p.add_(p.grad * (group["rho"] / (norm + 1e-12)))
        if zero_grad:
            self.zero_grad()

    @torch.no_grad()
    def second_step(self, zero_grad=False):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.data = self.state[p]["old_p"]
        self.base_optimizer.step()
        if zero_grad:
            self.zero_grad()

    @torch.no_grad()
    def step(self, closure=None):
        self.first_step(zero_grad=self.zero_first)
        torch.enable_grad()(closure)()
        self.second_step()


def test_sam_optimizer_two_steps_and_closure_are_clean():
    def run(form, zero_first=True, zero_grad=True):
        torch.manual_seed(0)
        m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
        opt = SAM(m.parameters(), torch.optim.SGD, lr=0.1, momentum=0.9, zero_first=zero_first)
        with gg.watch(mode="record") as w:
            for _ in range(6):
                x, y = torch.randn(8, 4), torch.randn(8, 1)
                if form == "two steps":
                    F.mse_loss(m(x), y).backward()
                    opt.first_step(zero_grad=True)
                    F.mse_loss(m(x), y).backward()
                    opt.second_step(zero_grad=True)
                else:
                    F.mse_loss(m(x), y).backward()
                    opt.step(lambda: F.mse_loss(m(x), y).backward())
                    if zero_grad:
                        opt.zero_grad()
        return codes(w)

    assert run("two steps") == []
    assert run("closure") == []  # the base optimizer's step inside SAM's step applied the gradient
    # The mutation: no clearing anywhere, so each step also applies the previous one's gradient (GG101), and
    # the first pass, left in .grad when the weights are perturbed, is added to the pass at the perturbed
    # weights (GG104: gradients at two different weights summed).
    assert run("closure", zero_first=False, zero_grad=False) == ["GG104", "GG101"]
