"""measure_memory and the automatic micro-batching (OOM injected on CPU), against float64 references."""

import pytest
import torch
from torch import nn
from torch.testing import assert_close

import gradguard as gg
from gradguard.microbatches import accumulate_batch
from gradguard.memory import MemoryReport, MemoryRow, default_sizes, format_bytes, parse_bytes, take

TOL = dict(rtol=1e-10, atol=1e-12)


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))


def mse(model, batch):
    return model(batch).pow(2).mean()


# ------------------------------------------------------------ measure_memory
def test_activation_bytes_are_exact_and_linear():
    report = gg.measure_memory(mlp(), mse, torch.randn(8, 8), [1, 2, 4, 8])
    # per item: input 8 floats + tanh output 16 (saved by tanh and the 2nd Linear: one storage) + output 1.
    assert [r.activation_bytes for r in report.rows] == [4 * 25 * m for m in (1, 2, 4, 8)]
    assert report.param_bytes == 4 * (8 * 16 + 16 + 16 + 1)
    assert report.grad_bytes == report.param_bytes and report.optimizer_bytes == 2 * report.grad_bytes
    assert all(r.peak_bytes is None for r in report.rows)


def test_a_storage_saved_twice_is_counted_once():
    class Square(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(4))

        def forward(self, x):
            h = x * self.w  # saves x (and the parameter, which is not an activation)
            return (h * h).sum()  # saves h twice: one storage

    report = gg.measure_memory(Square(), lambda m, b: m(b), torch.randn(3, 4), [3])
    assert report.rows[0].activation_bytes == 2 * 3 * 4 * 4


def test_existing_gradients_survive_and_nested_batches_are_sliced():
    model = mlp()
    model(torch.randn(2, 8)).sum().backward()
    before = [p.grad.clone() for p in model.parameters()]
    batch = {"x": torch.randn(6, 8), "meta": "kept", "pair": (torch.randn(6, 8), None)}
    sizes_seen = []

    def loss_fn(m, b):
        sizes_seen.append((b["x"].shape[0], b["pair"][0].shape[0], b["meta"]))
        return m(b["x"] + b["pair"][0]).mean()

    gg.measure_memory(model, loss_fn, batch, [2, 6])
    assert sizes_seen == [(2, 2, "kept"), (6, 6, "kept")]
    for p, b in zip(model.parameters(), before):
        assert torch.equal(p.grad, b)


def test_bad_sizes_are_refused():
    with pytest.raises(gg.GradguardError, match="between 1 and the batch's 4 items"):
        gg.measure_memory(mlp(), mse, torch.randn(4, 8), [2, 8])
    with pytest.raises(gg.GradguardError, match="empty"):
        gg.measure_memory(mlp(), mse, torch.randn(4, 8), [])


def test_report_picks_the_largest_fitting_size_and_prints_a_table():
    rows = [MemoryRow(1, 100), MemoryRow(2, 200), MemoryRow(4, 400)]
    report = MemoryReport(rows=rows, param_bytes=10, buffer_bytes=0, grad_bytes=10, optimizer_bytes=20, device="cpu")
    assert report.largest_fitting(240).micro_batch_size == 2
    assert report.largest_fitting(100) is None
    table = report.table(budget=240)
    assert "micro-batch" in table and table.count("yes") == 2 and "no" in table


def test_byte_units():
    assert parse_bytes("2GiB") == 2 * 1024**3
    assert parse_bytes("64MiB") == 64 * 2**20
    assert parse_bytes("1.5 GB") == 1_500_000_000
    assert parse_bytes("4096") == 4096
    with pytest.raises(gg.GradguardError, match="memory size"):
        parse_bytes("lots")
    assert format_bytes(3 * 2**20) == "3.00 MiB"
    assert default_sizes(12) == [1, 2, 4, 8, 12]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_peak_is_measured_and_grows():
    model = mlp().cuda()
    report = gg.measure_memory(model, mse, torch.randn(4096, 8, device="cuda"), [256, 4096])
    small, large = report.rows
    assert small.peak_bytes is not None and large.peak_bytes > small.peak_bytes
    assert large.activation_bytes == 4 * 25 * 4096


# ---------------------------------------------------------- accumulate_batch
class OOMAbove(nn.Module):
    """A float64 model whose forward raises torch.OutOfMemoryError, as CUDA would, for too large a micro-batch."""

    def __init__(self, threshold, fail_calls=()):
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3)).double()
        self.threshold, self.fail_calls, self.calls, self.sizes = threshold, set(fail_calls), 0, []

    def forward(self, x):
        self.calls += 1
        self.sizes.append(x.shape[0])
        if x.shape[0] > self.threshold or self.calls in self.fail_calls:
            raise torch.OutOfMemoryError(f"CUDA out of memory (injected, {x.shape[0]} rows)")
        return self.net(x)


def token_batch(n=10, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 5, 4, generator=g, dtype=torch.float64)  # n sequences of 5 positions
    y = torch.randint(3, (n, 5), generator=g)
    lengths = torch.randint(0, 6, (n,), generator=g)
    if n > 3:
        lengths[3] = 0  # an empty sequence
    y[torch.arange(5).expand(n, 5) >= lengths[:, None]] = -100
    return x, y


def token_loss(model, batch):
    x, y = batch
    logits = model(x)
    count = (y != -100).sum()
    return nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten(), ignore_index=-100), count


def full_batch_grads(model, batch):
    model.zero_grad()
    token_loss(model.net if hasattr(model, "net") else model, batch)[0].backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    return grads


@pytest.mark.slow  # several seconds on a busy 2-core machine
def test_oom_halves_and_the_gradient_is_exact():
    model = OOMAbove(threshold=3)
    batch = token_batch()
    want = full_batch_grads(model, batch)
    result = accumulate_batch(model, token_loss, batch, micro_batch_size=8)
    assert (result.micro_batch_size, result.retries) == (2, 2)
    assert result.count == int((batch[1] != -100).sum())
    for p, w in zip(model.parameters(), want):
        assert_close(p.grad, w, **TOL)
    # The next batch starts at the size that worked: no more failures.
    model.zero_grad()
    calls = model.calls
    accumulate_batch(model, token_loss, batch, micro_batch_size=result.micro_batch_size)
    assert model.calls - calls == 5


@pytest.mark.slow
def test_oom_after_some_micro_batches_counts_nothing_twice():
    # Size 4: micro-batch 1 back-propagates, micro-batch 2 fails; the retry at 2 must not add micro-batch 1 again.
    model = OOMAbove(threshold=100, fail_calls={2})
    batch = token_batch()
    want = full_batch_grads(model, batch)
    result = accumulate_batch(model, token_loss, batch, micro_batch_size=4)
    assert (result.micro_batch_size, result.retries) == (2, 1)
    for p, w in zip(model.parameters(), want):
        assert_close(p.grad, w, **TOL)
    # Negative control: keeping the failed attempt's partial gradient is measurably wrong.
    partial = OOMAbove(threshold=100)
    first = take(batch, 0, 4)
    loss, count = token_loss(partial, first)
    (loss * count / int((batch[1] != -100).sum())).backward()
    wrong = [p.grad + w for p, w in zip(partial.parameters(), want)]
    assert max((a - b).abs().max().item() for a, b in zip(wrong, want)) > 1e-3


@pytest.mark.slow  # several seconds on a busy 2-core machine
def test_inside_an_accumulator_window_earlier_gradients_are_kept():
    model = OOMAbove(threshold=3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    seen = []
    opt.register_step_pre_hook(lambda o, a, k: seen.append([p.grad.clone() for p in model.parameters()]))
    acc = gg.Accumulator(opt, steps=2)
    first, second = token_batch(3, seed=2), token_batch(10, seed=3)
    loss, count = token_loss(model, first)
    acc.backward(loss, count=count)  # micro-batch 0: in-flight gradients the retries must not touch
    acc.step()
    result = accumulate_batch(model, token_loss, second, micro_batch_size=8, acc=acc)
    assert result.retries == 2
    assert acc.step()
    union = (torch.cat([first[0], second[0]]), torch.cat([first[1], second[1]]))
    ref = OOMAbove(threshold=100)  # same seed: the parameters before the step
    want = full_batch_grads(ref, union)
    for g, w in zip(seen[0], want):
        assert_close(g, w, **TOL)
    n = int((union[1] != -100).sum())
    ref_loss = token_loss(ref.net, union)[0].item()
    assert acc.loss == pytest.approx(ref_loss, rel=1e-12)
    assert n == result.count + int(count)


@pytest.mark.slow  # several seconds on a busy 2-core machine
def test_even_the_smallest_size_fails_and_gradients_are_as_before():
    model = OOMAbove(threshold=0)
    model.net(torch.randn(2, 4, dtype=torch.float64)).sum().backward()
    before = [p.grad.clone() for p in model.parameters()]
    with pytest.raises(torch.OutOfMemoryError, match="even at micro-batch size 1"):
        accumulate_batch(model, token_loss, token_batch(), micro_batch_size=4)
    for p, b in zip(model.parameters(), before):
        assert torch.equal(p.grad, b)


def test_rows_count_when_loss_fn_gives_no_count():
    model = OOMAbove(threshold=100)
    x = torch.randn(7, 4, dtype=torch.float64)
    result = accumulate_batch(model, lambda m, b: m(b).pow(2).mean(), x, micro_batch_size=3)
    model2 = OOMAbove(threshold=100)
    model2(x).pow(2).mean().backward()
    assert result.count == 7
    for p, q in zip(model.parameters(), model2.parameters()):
        assert_close(p.grad, q.grad, **TOL)
    with pytest.raises(gg.GradguardError, match="micro_batch_size"):
        accumulate_batch(model, lambda m, b: m(b).sum(), x, micro_batch_size=0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_real_cuda_out_of_memory_is_recovered_exactly():
    free, _ = torch.cuda.mem_get_info()
    per_row = free // 6  # 6 or more rows of scratch cannot be allocated; 4 can

    class Hungry(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.lin = nn.Linear(4, 1).double()

        def forward(self, x):
            scratch = torch.empty(x.shape[0] * per_row, dtype=torch.uint8, device=x.device)
            del scratch  # only the allocation matters
            return self.lin(x)

    model = Hungry().cuda()
    x = torch.randn(10, 4, dtype=torch.float64, device="cuda")
    loss_fn = lambda m, b: m(b).pow(2).mean()  # noqa: E731
    result = accumulate_batch(model, loss_fn, x, micro_batch_size=8)
    assert (result.micro_batch_size, result.retries) == (4, 1)
    ref = Hungry()
    ref.lin(x.cpu()).pow(2).mean().backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        assert_close(p.grad.cpu(), q.grad, **TOL)
