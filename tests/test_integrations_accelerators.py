"""``gradguard.Accumulator(..., accelerator=acc)`` with a real Accelerate ``Accelerator`` and Lightning ``Fabric``.

K=4 over 10 micro-batches of unequal sizes (a final window of 2, stepped by
``flush()``), with and without clipping, one process and 2 processes on gloo,
against plain float64 full-batch training. Beside each, the framework's own
accumulation (Accelerate's ``accumulate()``, Fabric's ``no_backward_sync`` loop
with ``loss / K``) must differ from the reference.
"""

from __future__ import annotations

import pytest
import torch

import _integrations as S
import gradguard as gg

pytestmark = pytest.mark.slow

accelerate = pytest.importorskip("accelerate")
lightning_fabric = pytest.importorskip("lightning.fabric")


@pytest.fixture(autouse=True)
def fresh_accelerate_state():
    # Accelerate keeps one process-wide state for every Accelerator (accelerate's own tests reset it alike).
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    yield
    AcceleratorState._reset_state(True)
    GradientState._reset_state()


def _opt(model):
    return torch.optim.SGD(model.parameters(), lr=S.LR, momentum=S.MOMENTUM)


def _exact_loop(acc, model, data):
    for x, y in data:
        with acc.microbatch():
            acc.backward(S.loss_fn(model, x, y), count=len(x))
        acc.step()
    acc.flush()  # the final window of 2


def accelerate_exact(rank, world_size, clip, equal=False):
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    model = S.make_model()
    model, opt = accelerator.prepare(model, _opt(model))
    acc = gg.Accumulator(opt, S.K, model=model, accelerator=accelerator, max_grad_norm=clip)
    _exact_loop(acc, model, S.batches(rank, equal=equal))
    assert acc.optimizer_steps == 3
    return [p.detach().clone() for p in accelerator.unwrap_model(model).parameters()]


def accelerate_alone(rank, world_size, clip):
    """Accelerate's documented loop: accumulate() and a prepared optimizer that steps every K-th call."""
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=S.K)
    model = S.make_model()
    model, opt = accelerator.prepare(model, _opt(model))
    data = S.batches(rank)
    for i, (x, y) in enumerate(data):
        # Tell Accelerate where the data ends, as a prepared DataLoader would: the final partial window steps.
        accelerator.gradient_state._set_end_of_dataloader(i == len(data) - 1) if hasattr(
            accelerator.gradient_state, "_set_end_of_dataloader") else None
        with accelerator.accumulate(model):
            accelerator.backward(S.loss_fn(model, x, y))
            if clip is not None and accelerator.sync_gradients:
                accelerator.clip_grad_norm_(model.parameters(), clip)
            opt.step()
            opt.zero_grad()
    return [p.detach().clone() for p in accelerator.unwrap_model(model).parameters()]


def _fabric(world_size):
    from lightning.fabric import Fabric

    fabric = Fabric(accelerator="cpu", devices=world_size, strategy="ddp" if world_size > 1 else "auto", precision="64-true")
    fabric.launch()
    return fabric


def _float64_outputs(fn, *args):
    """Fabric hands module outputs back in the default dtype: make that float64, so the loss is not rounded."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        return fn(*args)
    finally:
        torch.set_default_dtype(old)


def _fabric_exact(rank, world_size, clip):
    fabric = _fabric(world_size)
    model = S.make_model()
    model, opt = fabric.setup(model, _opt(model))
    acc = gg.Accumulator(opt, S.K, model=model, accelerator=fabric, max_grad_norm=clip)
    _exact_loop(acc, model, S.batches(rank))
    assert acc.optimizer_steps == 3
    return [p.detach().clone() for p in model.module.parameters()]


def _fabric_alone(rank, world_size, clip):
    """Fabric's documented accumulation loop with the usual loss / K."""
    fabric = _fabric(world_size)
    model = S.make_model()
    model, opt = fabric.setup(model, _opt(model))
    data = S.batches(rank)
    for i, (x, y) in enumerate(data):
        ends = (i + 1) % S.K == 0 or i == len(data) - 1
        with fabric.no_backward_sync(model, enabled=not ends):
            fabric.backward(S.loss_fn(model, x, y) / S.K)
        if ends:
            if clip is not None:
                fabric.clip_gradients(model, opt, max_norm=clip)
            opt.step()  # gradguard: ignore[GG111] (the naive loop this test compares against: last window K'/K)
            opt.zero_grad()
    return [p.detach().clone() for p in model.module.parameters()]


def fabric_exact(*args):
    return _float64_outputs(_fabric_exact, *args)


def fabric_alone(*args):
    return _float64_outputs(_fabric_alone, *args)


@pytest.mark.parametrize("clip", [None, S.CLIP])
@pytest.mark.parametrize("exact, alone", [(accelerate_exact, accelerate_alone), (fabric_exact, fabric_alone)],
                         ids=["accelerate", "fabric"])
def test_one_process_exact_and_framework_alone_is_not(exact, alone, clip):
    want = S.reference_params([S.batches(0)], clip)
    assert S.rel_change_error(exact(0, 1, clip), want) < 1e-10
    assert S.rel_change_error(alone(0, 1, clip), want) > 1e-4


def _two_ranks(rank, world_size, exact, alone, clip):
    return exact(rank, world_size, clip), alone(rank, world_size, clip)


@pytest.mark.parametrize("exact, alone", [(accelerate_exact, accelerate_alone), (fabric_exact, fabric_alone)],
                         ids=["accelerate", "fabric"])
def test_two_processes_exact_and_framework_alone_is_not(exact, alone):
    want = S.reference_params([S.batches(0), S.batches(1)], S.CLIP)
    for got, control in S.spawn(_two_ranks, 2, exact=exact, alone=alone, clip=S.CLIP):
        assert S.rel_change_error(got, want) < 1e-10
        assert S.rel_change_error(control, want) > 1e-4


def _stray_loop(acc, model, opt, data, rank, stray):
    """The exact loop with the ported hand loop's ``opt.zero_grad()`` at the top of every iteration on rank 1."""
    errors = []
    for x, y in data:
        if stray and rank == 1:
            opt.zero_grad()
        with acc.microbatch():
            acc.backward(S.loss_fn(model, x, y), count=len(x))
        try:
            acc.step()
        except gg.GradguardError as exc:
            errors.append(str(exc))
    try:
        acc.flush()  # the final window of 2
    except gg.GradguardError as exc:
        errors.append(str(exc))
    return errors, acc.optimizer_steps, acc.skipped_windows


def accelerate_stray(rank, world_size, stray):
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    model = S.make_model()
    model, opt = accelerator.prepare(model, _opt(model))
    acc = gg.Accumulator(opt, S.K, model=model, accelerator=accelerator)
    out = _stray_loop(acc, model, opt, S.batches(rank), rank, stray)
    return out, [p.detach().clone() for p in accelerator.unwrap_model(model).parameters()]


def _fabric_stray(rank, world_size, stray):
    fabric = _fabric(world_size)
    model = S.make_model()
    model, opt = fabric.setup(model, _opt(model))
    acc = gg.Accumulator(opt, S.K, model=model, accelerator=fabric)
    out = _stray_loop(acc, model, opt, S.batches(rank), rank, stray)
    return out, [p.detach().clone() for p in model.module.parameters()]


def fabric_stray(*args):
    return _float64_outputs(_fabric_stray, *args)


def _stray_and_control(rank, world_size, run):
    return run(rank, world_size, True), run(rank, world_size, False)


@pytest.mark.parametrize("run", [accelerate_stray, fabric_stray], ids=["accelerate", "fabric"])
def test_two_processes_a_stray_zero_grad_on_one_rank_is_refused_on_every_rank_before_any_update(run):
    """Each of the 3 windows refused on both ranks, parameters as built; the same loop without it is exact."""
    init = [p.detach().clone() for p in S.make_model().parameters()]
    want = S.reference_params([S.batches(0), S.batches(1)], None)
    for rank, (((errors, steps, skipped), params), ((c_errors, c_steps, _), control)) in enumerate(
            S.spawn(_stray_and_control, 2, run=run)):
        assert len(errors) == 3 and (steps, skipped) == (0, 3), errors
        for message in errors:
            assert ("something other than the Accumulator" if rank == 1 else "on another rank") in message, message
        assert all(torch.equal(p, q) for p, q in zip(params, init))
        assert c_errors == [] and c_steps == 3 and S.rel_change_error(control, want) < 1e-10


def test_accelerate_equal_counts_skip_the_normalisation():
    """Equal counts: loss / K is already exact, and the result still matches the reference."""
    want = S.reference_params([S.batches(0, equal=True)], None)
    assert S.rel_change_error(accelerate_exact(0, 1, None, equal=True), want) < 1e-10


# ------------------------------------------------------------------ bad input
def test_accelerator_with_gradient_accumulation_steps_is_refused():
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=4)
    model = S.make_model()
    model, opt = accelerator.prepare(model, _opt(model))
    with pytest.raises(gg.GradguardError, match="gradient_accumulation_steps=4"):
        gg.Accumulator(opt, 4, model=model, accelerator=accelerator)


def test_unprepared_optimizer_scaler_and_unknown_accelerator_are_refused():
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    model = S.make_model()
    with pytest.raises(gg.GradguardError, match="accelerator.prepare"):
        gg.Accumulator(_opt(model), 4, accelerator=accelerator)
    _, opt = accelerator.prepare(model, _opt(model))
    with pytest.raises(gg.GradguardError, match="owns the GradScaler"):
        gg.Accumulator(opt, 4, accelerator=accelerator, scaler=torch.amp.GradScaler("cpu"))
    with pytest.raises(gg.GradguardError, match="accelerate.Accelerator or a lightning.fabric.Fabric"):
        gg.Accumulator(opt, 4, accelerator=object())


@pytest.mark.parametrize("kind", ["FSDP", "DEEPSPEED", "MEGATRON_LM", "XLA"])
def test_accelerate_plugins_it_cannot_drive_are_refused(kind):
    """A real Accelerator whose distributed type keeps gradients in its own engine is refused before anything runs.

    Those set-ups need GPUs, TPUs or packages this CPU machine lacks (``accelerate launch --use_fsdp`` falls back
    to MULTI_CPU here), so the prepared state is given the type such a launch would have set.
    """
    from accelerate import Accelerator
    from accelerate.utils import DistributedType

    accelerator = Accelerator(cpu=True)
    model = S.make_model()
    model, opt = accelerator.prepare(model, _opt(model))
    accelerator.state.distributed_type = DistributedType[kind]
    # Under DeepSpeed the error points at the engine path (tested on a real engine in test_deepspeed.py).
    expected = r"gg\.Accumulator\(engine, steps\)" if kind == "DEEPSPEED" else f"distributed_type={kind}"
    with pytest.raises(gg.GradguardError, match=expected):
        gg.Accumulator(opt, 4, model=model, accelerator=accelerator)


def test_inside_accelerate_accumulate_is_refused():
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    model = S.make_model()
    model, opt = accelerator.prepare(model, _opt(model))
    acc = gg.Accumulator(opt, 1, model=model, accelerator=accelerator)
    x, y = S.batches(0)[0]
    accelerator.gradient_state._set_sync_gradients(False)  # what accumulate() does on a non-final micro-batch
    acc.backward(S.loss_fn(model, x, y), count=len(x))
    with pytest.raises(gg.GradguardError, match="accelerate.accumulate|accelerator.accumulate"):
        acc.step()


def test_fabric_strategies_it_cannot_drive_are_refused():
    from lightning.fabric import Fabric

    fabric = Fabric(accelerator="cpu", devices=1)
    model = S.make_model()
    model, opt = fabric.setup(model, _opt(model))
    with pytest.raises(gg.GradguardError, match="fabric.setup"):
        gg.Accumulator(_opt(S.make_model()), 4, accelerator=fabric)
    from lightning.fabric.strategies import ModelParallelStrategy

    sharded = Fabric(accelerator="cpu", devices=1, strategy=ModelParallelStrategy(parallelize_fn=lambda m, mesh: m))
    with pytest.raises(gg.GradguardError, match="ModelParallelStrategy"):
        gg.Accumulator(opt, 4, accelerator=sharded)


def test_core_import_does_not_import_the_frameworks():
    import subprocess
    import sys

    code = ("import sys, gradguard as gg, torch; m = torch.nn.Linear(2, 1); "
            "a = gg.Accumulator(torch.optim.SGD(m.parameters(), lr=0.1), 2); gg.watch; gg.lint_source; "
            "import gradguard.integrations; "
            "bad = [n for n in ('lightning', 'accelerate', 'transformers', 'lightning_fabric') if n in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
