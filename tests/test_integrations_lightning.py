"""gradguard.integrations.lightning against a plain float64 full-batch reference.

Real Lightning ``Trainer`` runs: K=4 over 10 micro-batches of unequal sizes (a
final window of 2), with and without gradient clipping, one process and
2-process DDP on gloo. Beside each exact run, the same run without the callback
(Lightning alone) must differ from the reference, so the test cannot pass by
accident.
"""

from __future__ import annotations

import logging
import os
import warnings

import pytest
import torch

import _integrations as S

L = pytest.importorskip("lightning.pytorch")

import gradguard as gg  # noqa: E402
from gradguard.integrations.lightning import ExactAccumulation, Watch, default_count  # noqa: E402

pytestmark = pytest.mark.slow


class Module(L.LightningModule):
    def __init__(self, schedule: bool = False):
        super().__init__()
        self.net = S.make_model()
        self.schedule = schedule

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = S.loss_fn(self.net, x, y)  # the loss line the watch must point at
        return loss

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=S.LR, momentum=S.MOMENTUM)
        if not self.schedule:
            return opt
        # A constant-factor schedule: the reference uses LR throughout, so factor 1 keeps them comparable
        # while the scheduler still steps every window.
        return {"optimizer": opt, "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0),
                                                   "interval": "step"}}


def fit(rank_batches, *, callbacks=(), clip=None, accumulate=S.K, world_size=1, precision="64-true", schedule=False,
        root=None, epochs=1, module=None, ckpt_path=None, log_every_n_steps=50, logger=None):
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    warnings.filterwarnings("ignore", ".*LightningModule.*log.*")
    loader = rank_batches if isinstance(rank_batches, Resumable) else \
        torch.utils.data.DataLoader(rank_batches, batch_size=None)
    trainer = L.Trainer(
        max_epochs=epochs, accelerator="cpu", devices=world_size, strategy="ddp" if world_size > 1 else "auto",
        accumulate_grad_batches=accumulate, gradient_clip_val=clip, precision=precision, callbacks=list(callbacks),
        logger=logger or False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        use_distributed_sampler=False, default_root_dir=root or os.getcwd(), log_every_n_steps=log_every_n_steps,
    )
    module = module or Module(schedule)
    trainer.fit(module, loader, ckpt_path=ckpt_path)
    return [p.detach().clone() for p in module.net.parameters()], trainer


@pytest.mark.parametrize("clip", [None, S.CLIP])
def test_one_process_exact_and_lightning_alone_is_not(tmp_path, clip):
    data = S.batches(0)
    want = S.reference_params([data], clip)
    cb = ExactAccumulation()
    got, trainer = fit(data, callbacks=[cb], clip=clip, root=tmp_path, schedule=True)
    assert trainer.global_step == 3  # windows of 4, 4 and the final 2
    assert S.rel_change_error(got, want) < 1e-10
    alone, _ = fit(data, clip=clip, root=tmp_path)
    assert S.rel_change_error(alone, want) > 1e-4


def test_logged_loss_is_the_exact_window_loss(tmp_path):
    data = S.batches(0)
    cb = ExactAccumulation()
    fit(data, callbacks=[cb], root=tmp_path)
    # The last window (micro-batches 8 and 9) after two steps: its full-batch loss under the reference's parameters.
    model = S.make_model()
    opt = torch.optim.SGD(model.parameters(), lr=S.LR, momentum=S.MOMENTUM)
    for start in (0, 4):
        opt.zero_grad()
        S.loss_fn(model, torch.cat([b[0] for b in data[start:start + 4]]), torch.cat([b[1] for b in data[start:start + 4]])).backward()
        opt.step()
    with torch.no_grad():
        want = float(S.loss_fn(model, torch.cat([b[0] for b in data[8:]]), torch.cat([b[1] for b in data[8:]])))
    assert cb.loss == pytest.approx(want, rel=1e-10)


def test_token_counts_from_count_fn(tmp_path):
    """Masked items: the count is the number of unmasked rows, read from a device tensor."""
    data = S.batches(0)
    masked = []
    for i, (x, y) in enumerate(data):
        keep = torch.ones(len(x), dtype=torch.bool)
        keep[: i % 3] = False
        masked.append((x, y, keep))

    class Masked(Module):
        def training_step(self, batch, batch_idx):
            x, y, keep = batch
            return ((self.net(x) - y).pow(2).mean(1) * keep).sum() / keep.sum()

    ref = [(x[k], y[k]) for x, y, k in masked]
    want = S.reference_params([ref], None)
    cb = ExactAccumulation(count_fn=lambda b: b[2].sum())
    module = Masked()
    got, _ = fit(masked, callbacks=[cb], root=tmp_path, module=module)
    assert S.rel_change_error(got, want) < 1e-10


def test_bf16_mixed_runs_and_is_close(tmp_path):
    data = [(x.float(), y.float()) for x, y in S.batches(0)]
    want = S.reference_params([S.batches(0)], None)

    class F32(Module):
        def __init__(self):
            super().__init__()
            self.net = S.make_model().float()

    got, _ = fit(data, callbacks=[ExactAccumulation()], precision="bf16-mixed", root=tmp_path, module=F32())
    alone, _ = fit(data, precision="bf16-mixed", root=tmp_path, module=F32())
    err, err_alone = S.rel_change_error(got, want), S.rel_change_error(alone, want)
    assert err < 0.05 and err < err_alone / 2, (err, err_alone)


def _ddp_rank(rank, world_size, clip):
    from gradguard.integrations.lightning import ExactAccumulation

    data = S.batches(rank)
    cb = ExactAccumulation()
    exact, trainer = fit(data, callbacks=[cb], clip=clip, world_size=world_size)
    alone, _ = fit(data, clip=clip, world_size=world_size)
    return exact, alone, trainer.global_step, cb.loss


def test_ddp_two_processes_exact_and_lightning_alone_is_not():
    want = S.reference_params([S.batches(0), S.batches(1)], S.CLIP)
    results = S.spawn(_ddp_rank, 2, clip=S.CLIP)
    for exact, alone, steps, _ in results:
        assert steps == 3
        assert S.rel_change_error(exact, want) < 1e-10
        assert S.rel_change_error(alone, want) > 1e-4
    # .loss after the last window, on each rank: the full-batch loss of both ranks' last micro-batches
    # under the parameters after the first two windows (plain float64 PyTorch, as reference_params)
    data = [S.batches(0), S.batches(1)]
    model = S.make_model()
    opt = torch.optim.SGD(model.parameters(), lr=S.LR, momentum=S.MOMENTUM)
    for start in (0, 4):
        opt.zero_grad()
        S.loss_fn(model, torch.cat([b[0] for r in data for b in r[start:start + 4]]),
                  torch.cat([b[1] for r in data for b in r[start:start + 4]])).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), S.CLIP)
        opt.step()
    with torch.no_grad():
        want_loss = float(S.loss_fn(model, torch.cat([b[0] for r in data for b in r[8:]]),
                                    torch.cat([b[1] for r in data for b in r[8:]])))
    for *_, loss in results:
        assert loss == pytest.approx(want_loss, rel=1e-10)


def test_logged_window_loss_is_in_the_losss_own_precision(tmp_path):
    cb = ExactAccumulation()
    _, trainer = fit(S.batches(0), callbacks=[cb], root=tmp_path, log_every_n_steps=1)
    logged = trainer.callback_metrics["window_loss"]
    assert logged.dtype == torch.float64 and float(logged) == cb.loss


class Resumable:
    """A loader Lightning can resume mid-epoch (it has state_dict/load_state_dict): it skips the batches done."""

    def __init__(self, batches):
        self.batches, self.start, self.pos = batches, 0, 0

    def __len__(self):
        return len(self.batches)

    def __iter__(self):
        start, self.start = self.start, 0
        for self.pos in range(start, len(self.batches)):
            yield self.batches[self.pos]

    def state_dict(self):
        return {"pos": self.pos}

    def load_state_dict(self, state):
        self.start = state["pos"] + 1


class Crash(L.Callback):
    """Save a checkpoint at the end of micro-batch ``at`` (mid-window), then fail as a killed job would."""

    def __init__(self, at, path):
        self.at, self.path = at, path

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if batch_idx == self.at:
            trainer.save_checkpoint(self.path)
            raise RuntimeError("killed")


class Forgetful(ExactAccumulation):
    """The callback as it was: no window state in the checkpoint (the control)."""

    def state_dict(self):
        return {}

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        pass

    def load_state_dict(self, state_dict):
        pass


@pytest.mark.parametrize("at", [5, 6])  # 2 and 3 micro-batches into the second window of 4
def test_mid_window_resume_is_the_uninterrupted_run(tmp_path, at):
    data = S.batches(0)
    whole, _ = fit(Resumable(data), callbacks=[ExactAccumulation()], root=tmp_path)
    assert S.rel_change_error(whole, S.reference_params([data], None)) < 1e-10

    def interrupted(cls):
        ckpt = str(tmp_path / f"mid-{cls.__name__}.ckpt")
        with pytest.raises(RuntimeError, match="killed"):
            fit(Resumable(data), callbacks=[cls(), Crash(at, ckpt)], root=tmp_path)
        cb = cls()
        got, trainer = fit(Resumable(data), callbacks=[cb], root=tmp_path, ckpt_path=ckpt)
        assert trainer.global_step == 3
        return got, cb

    resumed, cb = interrupted(ExactAccumulation)
    assert max(float((a - b).abs().max()) for a, b in zip(resumed, whole)) < 1e-12
    assert cb.loss is not None
    control, _ = interrupted(Forgetful)  # without the window's state the resumed run is off
    assert S.rel_change_error(control, S.reference_params([data], None)) > 1e-3


# ---------------------------------------- dict outputs and skipped batches (the routed training_step)
class DictSkipping(Module):
    """Returns its loss in a dict (with another value beside it) and skips one micro-batch (returns None:
    Lightning runs no backward for it)."""

    def __init__(self, skip):
        super().__init__()
        self.skip = skip

    def training_step(self, batch, batch_idx):
        if batch_idx == self.skip:
            return None
        x, y = batch
        return {"loss": S.loss_fn(self.net, x, y), "rows": x.shape[0]}


def manual_reference(data, windows):
    """Plain float64 full-batch SGD over the given windows (lists of micro-batch indices): the parameters after
    the last step, and the last window's loss before it."""
    model = S.make_model()
    opt = torch.optim.SGD(model.parameters(), lr=S.LR, momentum=S.MOMENTUM)
    for window in windows:
        opt.zero_grad()
        loss = S.loss_fn(model, torch.cat([data[i][0] for i in window]), torch.cat([data[i][1] for i in window]))
        loss.backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()], float(loss)


def test_dict_outputs_and_a_skipped_batch_are_exact(tmp_path):
    """The window gradient and loss are those of the items of the micro-batches that ran a backward: the
    skipped micro-batch counts nowhere, the dict's "loss" is the loss; Lightning alone is off."""
    data = S.batches(0)
    cb = ExactAccumulation()
    module = DictSkipping(skip=5)
    got, trainer = fit(data, callbacks=[cb], root=tmp_path, module=module)
    assert trainer.global_step == 3
    want, want_loss = manual_reference(data, [[0, 1, 2, 3], [4, 6, 7], [8, 9]])
    assert S.rel_change_error(got, want) < 1e-10
    assert cb.loss == pytest.approx(want_loss, rel=1e-10)
    # The control: the skipped batch counted in its window's total (as if it had items and a zero gradient).
    counted, _ = manual_reference(data, [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]])
    assert S.rel_change_error(counted, want) > 1e-3
    alone, _ = fit(data, root=tmp_path, module=DictSkipping(skip=5))
    assert S.rel_change_error(alone, want) > 1e-3


class IterStep(Module):
    def training_step(self, dataloader_iter):
        x, y = next(dataloader_iter)[0]
        return S.loss_fn(self.net, x, y)


def test_a_training_step_taking_dataloader_iter_is_refused(tmp_path):
    """Such a training_step fetches its batch itself, after the callback would have counted it: refused at fit
    start, before any step."""
    module = IterStep()
    before = [p.detach().clone() for p in module.parameters()]
    with pytest.raises(gg.GradguardError, match="dataloader_iter"):
        fit(S.batches(0), callbacks=[ExactAccumulation()], root=tmp_path, module=module)
    assert all(torch.equal(a, p) for a, p in zip(before, module.parameters()))


# ------------------------------------------------------------------ bad input
def test_a_second_exact_accumulation_is_refused(tmp_path):
    """Two would apply the weights twice (39-45 % off): refused before any step."""
    module = Module()
    before = [p.detach().clone() for p in module.parameters()]
    # Two of the same class share a checkpoint key: Lightning itself refuses them when the Trainer is built.
    with pytest.raises(RuntimeError, match="more than one stateful callback of type `ExactAccumulation`"):
        fit(S.batches(0), callbacks=[ExactAccumulation(), ExactAccumulation()], root=tmp_path, module=module)
    # A subclass has its own key; gradguard refuses the pair when fit starts.
    with pytest.raises(gg.GradguardError, match="2 ExactAccumulation callbacks"):
        fit(S.batches(0), callbacks=[ExactAccumulation(), Forgetful()], root=tmp_path, module=module)
    assert all(torch.equal(a, p) for a, p in zip(before, module.parameters()))


def test_accumulate_grad_batches_1_is_refused(tmp_path):
    with pytest.raises(gg.GradguardError, match="does nothing with accumulate_grad_batches=1"):
        fit(S.batches(0), callbacks=[ExactAccumulation()], accumulate=1, root=tmp_path)


@pytest.mark.parametrize("bad, match", [(lambda b: -1, "must be >= 0"), (lambda b: 2.5, "must return the number of items"),
                                        (lambda b: torch.tensor(2.0), "integer 0-dim tensor"),
                                        (lambda b: torch.tensor(-3), "negative count")])
def test_bad_counts_are_refused(tmp_path, bad, match):
    with pytest.raises(gg.GradguardError, match=match):
        fit(S.batches(0), callbacks=[ExactAccumulation(count_fn=bad)], root=tmp_path)


def test_default_count():
    assert default_count({"x": torch.zeros(7, 2), "y": torch.zeros(7)}) == 7
    with pytest.raises(gg.GradguardError, match="count_fn"):
        default_count({"a": 1})


# ---------------------------------------------------------------------- watch
def test_watch_points_at_training_step_with_lightning_advice(tmp_path):
    w = Watch(mode="record")
    fit(S.batches(0), callbacks=[w], root=tmp_path)
    # unequal micro-batches weighted alike (GG105), and the final window of 2 divided by 4 (GG111, at step 3)
    assert [(f.code, f.step) for f in w.findings] == [("GG105", 1), ("GG111", 3)]
    import inspect
    src, first = inspect.getsourcelines(Module.training_step)
    for f in w.findings:
        assert f.path == __file__
        assert f.line == first + 2  # `loss = S.loss_fn(...)`
        assert "ExactAccumulation" in f.message and "acc.backward" not in f.message


def test_watch_is_clean_with_exact_accumulation(tmp_path):
    w = Watch(mode="raise")
    fit(S.batches(0), callbacks=[w, ExactAccumulation()], root=tmp_path)
    assert w.findings == []


def test_watch_raise_mode_raises_at_the_training_step_line(tmp_path):
    with pytest.raises(gg.GradientBugError) as info:
        fit(S.batches(0), callbacks=[Watch(mode="raise")], root=tmp_path)
    assert info.value.finding.path == __file__ and "ExactAccumulation" in str(info.value)


class LogRecorder(Module):
    """The module's own ``log`` (what ExactAccumulation calls), recording every window_loss it is given."""

    def __init__(self):
        super().__init__()
        self.logged = []

    def log(self, name, value, *args, **kwargs):
        if name == "window_loss":
            self.logged.append(float(value))
        return super().log(name, value, *args, **kwargs)


class Written(L.loggers.Logger):
    """A logger keeping what Lightning writes: (step, metrics) rows."""

    def __init__(self):
        super().__init__()
        self.rows = []

    @property
    def name(self):
        return "written"

    @property
    def version(self):
        return 0

    def log_hyperparams(self, *args, **kwargs):
        pass

    def log_metrics(self, metrics, step=None):
        self.rows.append((step, dict(metrics)))

    def window_losses(self):
        return [(step, m["window_loss"]) for step, m in self.rows if "window_loss" in m]


@pytest.mark.parametrize("every,want_windows", [(1, [1, 2, 3]), (2, [2]), (3, [3]), (50, [])])
def test_window_loss_logged_only_on_the_steps_lightning_writes_logs(tmp_path, every, want_windows):
    """Lightning writes logged metrics every log_every_n_steps optimizer steps; logging the window loss in
    between costs time (LightningModule.log) and is never written, so it is logged on those steps only, and
    written at the window it closes. .loss is the exact loss of the last window whatever the cadence."""
    data = S.batches(0)  # 10 micro-batches, K=4: steps 1, 2 and 3 (the final window of 2)
    module, cb, written = LogRecorder(), ExactAccumulation(), Written()
    fit(data, callbacks=[cb], root=tmp_path, module=module, log_every_n_steps=every, logger=written)
    # Lightning writes a step's metrics under the number of steps taken before it (window w under w - 1).
    assert [step + 1 for step, _ in written.window_losses()] == want_windows
    assert len(module.logged) == len(want_windows)  # no LightningModule.log call that is not written
    every_step, all_written = LogRecorder(), Written()  # the control's run: every window logged and written
    fit(data, callbacks=[ExactAccumulation()], root=tmp_path, module=every_step, log_every_n_steps=1,
        logger=all_written)
    assert [step + 1 for step, _ in all_written.window_losses()] == [1, 2, 3]
    assert [v for _, v in all_written.window_losses()] == every_step.logged  # written as logged
    assert all(value == dict(all_written.window_losses())[step] for step, value in written.window_losses())
    assert cb.loss == every_step.logged[-1]


class AskBoth(L.Callback):
    """At every optimizer step (where ExactAccumulation closes its window): the callback's answer to "does Lightning
    write its logs after this step" beside Lightning's own test, asked in the same state; stops training at
    ``stop_at`` (Lightning then writes the stopping step's logs whatever the cadence)."""

    def __init__(self, stop_at=None):
        self.answers, self.stop_at = [], stop_at

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        from gradguard.integrations.lightning.exact import _lightning_logs_now

        if self.stop_at is not None and trainer.global_step + 1 == self.stop_at:
            trainer.should_stop = True
        own = bool(trainer._logger_connector.should_update_logs) or bool(trainer.fast_dev_run)
        self.answers.append((_lightning_logs_now(trainer), own))


@pytest.mark.parametrize("every,stop_at", [(1, None), (2, None), (3, None), (50, None), (3, 2), (0, None)])
def test_the_logging_steps_are_lightnings_own(tmp_path, every, stop_at):
    """The callback answers most windows from Lightning's step count before asking Lightning's own (slower) test:
    the answers agree on every step, at every cadence, when training stops between cadence steps and with logging
    off (log_every_n_steps=0). Negative control: the test finds logging steps at all (else agreement is vacuous)."""
    ask = AskBoth(stop_at)
    fit(S.batches(0) * 3, callbacks=[ExactAccumulation(), ask], root=tmp_path, log_every_n_steps=every)
    mine = [m for m, _ in ask.answers]
    assert mine == [o for _, o in ask.answers], ask.answers
    if every in (1, 2, 3):
        assert any(mine) and (every == 1 or not all(mine))
    if stop_at is not None:
        assert mine[-1] and len(mine) == stop_at  # the stopping step is written, off the cadence


# ---------------------------------------------- the weighting's place in Lightning's backward
class OwnBackward(Module):
    """A module that overrides LightningModule.backward (it is still what runs the pass)."""

    passes = 0

    def backward(self, loss, *args, **kwargs):
        self.passes += 1
        loss.backward(*args, **kwargs)


class SeesLosses(L.Callback):
    def __init__(self):
        self.before, self.outputs, self.trainer = [], [], None

    def setup(self, trainer, pl_module, stage):
        self.trainer = trainer

    def on_before_backward(self, trainer, pl_module, loss):
        self.before.append(loss.detach().clone())

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.outputs.append(outputs["loss"].detach().clone())


def test_weighting_leaves_lightnings_hooks_and_the_users_backward_alone(tmp_path):
    """The count weight multiplies the loss only on its way into the backward pass: the user's own
    ``backward`` still runs each pass and the result is exact; ``on_before_backward`` hooks see Lightning's
    loss (the mean / K); after the fit, and after a fit that fails, the precision plugin is Lightning's again."""
    data = S.batches(0)
    module, seen = OwnBackward(), SeesLosses()
    got, trainer = fit(data, callbacks=[ExactAccumulation(), seen], root=tmp_path, module=module)
    assert S.rel_change_error(got, S.reference_params([data], None)) < 1e-10
    assert module.passes == len(data)
    assert len(seen.before) == len(data)
    assert all(torch.equal(a, b) for a, b in zip(seen.before, seen.outputs))
    assert "backward" not in vars(trainer.strategy.precision_plugin)

    def fails_at_batch_5(batch, calls=[]):  # noqa: B006 - counts the calls
        calls.append(1)
        if len(calls) == 5:
            raise RuntimeError("count failed")
        return default_count(batch)

    seen = SeesLosses()
    with pytest.raises(RuntimeError, match="count failed"):
        fit(data, callbacks=[ExactAccumulation(count_fn=fails_at_batch_5), seen], root=tmp_path)
    assert "backward" not in vars(seen.trainer.strategy.precision_plugin)
    # Negative control: a Lightning run without the callback is not the reference.
    alone, _ = fit(data, root=tmp_path, module=OwnBackward())
    assert S.rel_change_error(alone, S.reference_params([data], None)) > 1e-4


def test_weights_stay_exact_when_the_counts_change_by_orders_of_magnitude(tmp_path):
    """The micro-batch weights are made once per count and reference count, then reused: windows whose counts jump
    from ~2 to ~60 and back (the reference changes) and a second fit with the same callback in another precision
    must each be exact, and the kept weights must still be ``n / ref`` after the backward passes read them."""
    g = torch.Generator().manual_seed(7)
    sizes = [1, 2, 1, 3, 60, 40, 50, 70, 2, 1, 3, 1, 64, 64, 2, 90, 5, 6]
    data = [(torch.randn(c, S.IN, generator=g, dtype=torch.float64), torch.randn(c, S.OUT, generator=g, dtype=torch.float64))
            for c in sizes]
    want = S.reference_params([data], None)
    cb = ExactAccumulation()
    got, _ = fit(data, callbacks=[cb], root=tmp_path)
    assert S.rel_change_error(got, want) < 1e-10
    ref, dtype, _ = cb._weights_for
    assert cb._weights and all(w is None or (w.dtype == dtype and float(w) == n / ref) for n, w in cb._weights.items())

    class F32(Module):
        def __init__(self):
            super().__init__()
            self.net = S.make_model().float()

    got32, _ = fit([(x.float(), y.float()) for x, y in data], callbacks=[cb], root=tmp_path, module=F32(),
                   precision="32-true")
    assert cb._weights_for[1] == torch.float32
    assert S.rel_change_error(got32, want) < 1e-5
    # Negative control: Lightning alone on these windows is far off.
    alone, _ = fit(data, root=tmp_path)
    assert S.rel_change_error(alone, want) > 1e-2


# ---------------------------------------------- host reads after the window loss is logged
class _HostReads(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts host reads of tensor values (``.item()``, ``float(t)``: ``aten._local_scalar_dense``), per batch."""

    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default:
            self.n += 1
        return func(*args, **(kwargs or {}))


class _ReadsPerBatch(L.Callback):
    """Host reads from the start of each training batch to the start of the next (the optimizer step included)."""

    def __init__(self, mode):
        self.mode, self.marks = mode, []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.marks.append(self.mode.n)


def test_logging_the_window_loss_adds_no_host_read_per_micro_batch(tmp_path):
    """Once a value is logged, Lightning turns every progress-bar value into a Python number after every micro-batch
    for the rest of the epoch (a host read, a device sync on a GPU): the window loss is logged off the progress bar,
    so with the callback the micro-batches read the device no more often than Lightning alone does."""
    data = S.batches(0) * 2  # 20 micro-batches, K=4: the window loss logged at steps 1..5

    def reads(callbacks):
        with _HostReads() as mode:
            counter = _ReadsPerBatch(mode)
            fit(data, callbacks=[counter, *callbacks], root=tmp_path, log_every_n_steps=1)
        return [b - a for a, b in zip(counter.marks, counter.marks[1:])]

    alone, exact = reads([]), reads([ExactAccumulation(count_fn=len)])
    assert len(alone) == len(exact) == len(data) - 1
    # The logging steps (the last micro-batch of each window) may read; every other micro-batch reads as Lightning's.
    inside = [i for i in range(len(data) - 1) if (i + 1) % S.K]
    assert [exact[i] for i in inside] == [alone[i] for i in inside]

    class OnTheBar(L.Callback):  # the negative control: one value logged on the progress bar, as the callback did
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if batch_idx == 0:
                pl_module.log("x", outputs["loss"].detach(), prog_bar=True, batch_size=1)

    barred = reads([OnTheBar()])
    assert sum(barred[i] - alone[i] for i in inside) >= len(inside) - 1
