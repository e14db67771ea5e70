"""Checkpoints that resume mid-window, GradScaler and scheduler behaviour at the boundary."""

import math

import pytest
import torch
from torch import nn

import gradguard as gg
from reference import IGNORE, CaptureOptimizer, TiedEmbeddingLM, full_batch_grads, rel_error, token_ce


def _micro_batches(n_micro: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n_micro):
        size = 1 + (i * 7) % 5  # unequal sizes, including 1
        x = torch.randint(0, 11, (size, 4), generator=g)
        y = torch.randint(0, 11, (size, 4), generator=g)
        y[torch.rand(size, 4, generator=g) < 0.3] = IGNORE
        out.append((x, y))
    return out


def _fresh(seed: int = 0):
    torch.manual_seed(seed)
    model = TiedEmbeddingLM().double()
    opt = torch.optim.AdamW(model.parameters(), lr=0.02, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
    acc = gg.Accumulator(opt, steps=4, scheduler=sched, max_grad_norm=1.0)
    return model, opt, sched, acc


def _train(model, acc, batches):
    for x, y in batches:
        acc.backward(token_ce(model(x), y), count=int((y != IGNORE).sum()))
        acc.step()


@pytest.mark.parametrize("stop_after", [1, 6, 8, 10])
def test_resume_mid_window_is_bit_identical(tmp_path, stop_after):
    """Interrupt after `stop_after` micro-batches (mid-window for 1, 6, 10), save, reload, continue."""
    batches = _micro_batches(14)

    model, opt, sched, acc = _fresh()
    _train(model, acc, batches)
    acc.flush()
    uninterrupted = [p.detach().clone() for p in model.parameters()]

    model, opt, sched, acc = _fresh()
    _train(model, acc, batches[:stop_after])
    path = tmp_path / "ckpt.pt"
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict(), "acc": acc.state_dict()}, path)
    del model, opt, sched, acc

    ckpt = torch.load(path, weights_only=True)  # plain tensors and Python values only
    model, opt, sched, acc = _fresh(seed=123)  # different init: everything must come from the checkpoint
    model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["opt"])
    sched.load_state_dict(ckpt["sched"])
    acc.load_state_dict(ckpt["acc"])
    assert acc.micro_step == stop_after % 4
    _train(model, acc, batches[stop_after:])
    acc.flush()
    for p, q in zip(model.parameters(), uninterrupted):
        assert torch.equal(p, q)


def test_resume_without_in_flight_gradients_is_not_identical():
    """Negative control: dropping the in-flight gradients on resume changes the result."""
    batches = _micro_batches(8)
    model, opt, sched, acc = _fresh()
    _train(model, acc, batches)
    want = [p.detach().clone() for p in model.parameters()]

    model, opt, sched, acc = _fresh()
    _train(model, acc, batches[:6])
    sd = acc.state_dict()
    sd["grads"] = [None] * len(sd["grads"])
    model.zero_grad()
    # Such a state contradicts itself (items counted, no gradient for them): refused, nothing loaded.
    with pytest.raises(gg.GradguardError, match="holds no in-flight gradient"):
        acc.load_state_dict(sd)
    # Had it been loaded, the resumed run would be off: replay what loading it would do.
    sd["total"], sd["loss_sum"], sd["micro"], sd["counted"], sd["ref"] = 0, None, 0, None, None
    sd["bad"], sd["unreached"], sd["grads"] = None, None, []
    acc.load_state_dict(sd)
    _train(model, acc, batches[6:])
    assert any(not torch.equal(p, q) for p, q in zip(model.parameters(), want))


def test_load_state_dict_rejects_mismatches_and_changes_nothing():
    model, opt, sched, acc = _fresh()
    _train(model, acc, _micro_batches(2))
    sd = acc.state_dict()
    grads_before = [p.grad.clone() for p in model.parameters()]

    other = gg.Accumulator(opt, steps=3)
    with pytest.raises(gg.GradguardError, match="steps=4.*steps=3"):
        other.load_state_dict(sd)
    bad = dict(sd, grads=sd["grads"][:-1])
    with pytest.raises(gg.GradguardError, match="gradients for"):
        acc.load_state_dict(bad)
    bad = dict(sd, grads=[torch.zeros(2, 2)] + sd["grads"][1:])
    with pytest.raises(gg.GradguardError, match="shape"):
        acc.load_state_dict(bad)
    with pytest.raises(gg.GradguardError, match="not a gradguard Accumulator state"):
        acc.load_state_dict({"format": "something else"})
    with pytest.raises(gg.GradguardError, match="missing 'micro'"):
        acc.load_state_dict({k: v for k, v in sd.items() if k != "micro"})
    assert acc.micro_step == 2
    for p, g in zip(model.parameters(), grads_before):
        assert torch.equal(p.grad, g)


def _scaler():
    return torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=1)


def test_grad_scaler_unscales_before_clipping_and_matches_full_batch():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))
    x, y = torch.randn(9, 5), torch.randint(0, 3, (9,))
    full = full_batch_grads(model, token_ce(model(x), y))
    capture = CaptureOptimizer(model.parameters())
    scaler = _scaler()
    acc = gg.Accumulator(capture, steps=2, scaler=scaler, max_grad_norm=1e6)  # clipping forces unscale_ first
    for a, b in ((0, 2), (2, 9)):
        acc.backward(token_ce(model(x[a:b]), y[a:b]), count=b - a)
        acc.step()
    assert len(capture.captured) == 1
    assert rel_error(capture.captured[0], full) < 1e-5  # float32
    assert scaler.get_scale() == 2.0**11  # the step was taken, so the scale grew


def test_grad_scaler_overflow_skips_step_and_scheduler():
    torch.manual_seed(0)
    model = nn.Linear(5, 3)
    before = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    scaler = _scaler()
    acc = gg.Accumulator(opt, steps=2, scaler=scaler, scheduler=sched)
    x, y = torch.randn(4, 5), torch.randint(0, 3, (4,))
    acc.backward(token_ce(model(x[:2]), y[:2]), count=2)
    acc.step()
    def overflow(g):  # an overflow in the window's second pass, as fp16 produces
        g = g.clone()
        g[0, 0] = math.inf
        return g

    handle = model.weight.register_hook(overflow)
    acc.backward(token_ce(model(x[2:]), y[2:]), count=2)
    handle.remove()
    assert acc.step() is False
    assert sched.last_epoch == 0 and opt.param_groups[0]["lr"] == 0.1
    assert acc.optimizer_steps == 0 and acc.skipped_windows == 1
    assert scaler.get_scale() == 2.0**9
    for p, q in zip(model.parameters(), before):
        assert torch.equal(p, q)
    assert all(p.grad is None for p in model.parameters())
    # The next window steps normally.
    for a in (0, 2):
        acc.backward(token_ce(model(x[a : a + 2]), y[a : a + 2]), count=2)
        stepped = acc.step()
    assert stepped is True and sched.last_epoch == 1


def test_scheduler_steps_once_per_optimizer_step():
    model = nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    acc = gg.Accumulator(opt, steps=3, scheduler=sched)
    results = []
    for _ in range(7):
        acc.backward(model(torch.randn(2, 2)).pow(2).mean(), count=2)
        results.append(acc.step())
    results.append(acc.flush())
    assert results == [False, False, True, False, False, True, False, True]
    assert sched.last_epoch == 3 == acc.optimizer_steps


def test_loss_is_exact_window_mean_and_none_before_first_step():
    torch.manual_seed(1)
    model = nn.Linear(3, 1).double()
    acc = gg.Accumulator(CaptureOptimizer(model.parameters()), steps=2)
    assert acc.loss is None
    x, y = torch.randn(7, 3, dtype=torch.float64), torch.randn(7, 1, dtype=torch.float64)
    for a, b in ((0, 2), (2, 7)):
        acc.backward(nn.functional.mse_loss(model(x[a:b]), y[a:b]), count=b - a)
        acc.step()
    assert acc.loss == pytest.approx(nn.functional.mse_loss(model(x), y).item(), rel=1e-12)
    # Negative control: the mean of the two micro-batch means is a different number.
    mean_of_means = (nn.functional.mse_loss(model(x[:2]), y[:2]) + nn.functional.mse_loss(model(x[2:]), y[2:])).item() / 2
    assert abs(acc.loss - mean_of_means) > 1e-3


class _FailsOnce(CaptureOptimizer):
    """Raises on its first step (like an out-of-memory error while creating optimizer state)."""

    failed = False

    def step(self, closure=None):
        if not self.failed:
            self.failed = True
            raise RuntimeError("simulated out of memory in optimizer.step()")
        return super().step(closure)


def test_a_failed_step_can_be_retried_without_normalising_twice():
    torch.manual_seed(0)
    model = nn.Linear(3, 1).double()
    x, y = torch.randn(5, 3, dtype=torch.float64), torch.randn(5, 1, dtype=torch.float64)
    full = full_batch_grads(model, nn.functional.mse_loss(model(x), y))
    opt = _FailsOnce(model.parameters())
    acc = gg.Accumulator(opt, steps=2)
    acc.backward(nn.functional.mse_loss(model(x[:1]), y[:1]), count=1)
    acc.step()
    acc.backward(nn.functional.mse_loss(model(x[1:]), y[1:]), count=4)
    with pytest.raises(RuntimeError, match="simulated"):
        acc.step()
    assert acc.flush() is True  # the pending window, stepped again
    assert rel_error(opt.captured[0], full) < 1e-12


def test_in_flight_gradients_stay_near_a_mean_loss_scale_with_skewed_counts():
    """Counts [1, 2000]: no in-flight sum strays far from a mean loss's scale, and both windows are exact."""
    torch.manual_seed(0)
    model = nn.Linear(4, 1).double()
    capture = CaptureOptimizer(model.parameters())
    acc = gg.Accumulator(capture, steps=2)
    xs = [torch.randn(n, 4, dtype=torch.float64) for n in (1, 2000, 1, 2000)]
    norms = []
    for x in xs:
        loss = model(x).pow(2).mean()
        acc.backward(loss, count=x.shape[0])
        norms.append(model.weight.grad.norm().item())
        acc.step()
    mean_loss_norm = torch.autograd.grad(model(xs[1]).pow(2).mean(), model.weight)[0].norm().item()
    # Second window: scaled by the first window's mean count (1000.5), so within a small factor of a mean loss.
    assert norms[3] < 10 * mean_loss_norm
    # First window: the reference was its first count (1); the count 2000 rescaled the in-flight sum
    # and became the reference, instead of weighing 1000x a mean loss.
    assert norms[1] < 10 * mean_loss_norm
    for got, (a, b) in zip(capture.captured, ((0, 2), (2, 4))):
        x = torch.cat(xs[a:b])
        assert rel_error(got, full_batch_grads(model, model(x).pow(2).mean())) < 1e-12


def test_sparse_gradients_with_clipping_get_a_clear_error_and_keep_the_window():
    emb = nn.Embedding(10, 3, sparse=True).double()
    opt = torch.optim.SparseAdam(emb.parameters(), lr=0.1)
    acc = gg.Accumulator(opt, steps=2, max_grad_norm=1.0)
    acc.backward(emb(torch.tensor([1, 2])).pow(2).mean(), count=2)
    acc.step()
    acc.backward(emb(torch.tensor([3, 4, 5])).pow(2).mean(), count=3)
    before = emb.weight.grad.to_dense().clone()
    with pytest.raises(gg.GradguardError, match="sparse"):
        acc.step()
    assert torch.equal(emb.weight.grad.to_dense(), before)
    acc.max_grad_norm = None
    assert acc.flush() is True


def test_disabled_scaler_steps_every_window():
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, 1)
    acc = gg.Accumulator(opt, steps=1, scaler=torch.amp.GradScaler("cpu", enabled=False), scheduler=sched)
    for _ in range(3):
        acc.backward(model(torch.randn(2, 3)).pow(2).mean(), count=2)
        assert acc.step() is True
    assert sched.last_epoch == 3 and acc.skipped_windows == 0
