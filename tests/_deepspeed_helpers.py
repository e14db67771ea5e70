"""DeepSpeed scenarios for tests/test_deepspeed.py, run under torchrun (gloo, CPU).

``python -m torch.distributed.run --nproc-per-node N _deepspeed_helpers.py OUT STAGES...``
runs, for every ZeRO stage named, on real ``deepspeed.DeepSpeedEngine`` objects:

* ``exact``: ``gg.Accumulator(engine, STEPS)`` over ``_dist_helpers.SCHEDULE``
  (unequal counts, empty micro-batches, a rank with 0 items, partial windows
  stepped by ``flush()``): the parameters after every window and ``acc.loss``;
* ``naive`` / ``gradguard``: the negative control on ``NAIVE_SCHEDULE`` (full
  windows, unequal counts): the engine's own accumulation (``engine.backward``
  divides by ``gradient_accumulation_steps``, ``engine.step()`` per micro-batch)
  beside the Accumulator on the same data;
* ``clipped``: the Accumulator with the engine's ``gradient_clipping`` on;
* ``collectives``: all-reduces per window (counted on ``torch.distributed``);
* ``accelerate``: HF Accelerate with a DeepSpeed plugin (ZeRO-2): the engine that
  ``accelerator.prepare`` returns, driven by the Accumulator.

Each rank saves what it saw to OUT/<stage>-rank<r>.pt; the test compares with
the float64 full-batch reference built here in plain PyTorch (``reference``),
which never touches DeepSpeed or gradguard.

DeepSpeed is built in float32 (it refuses float64 gradients), so results are
compared at float32 round-off. Its CPU communication backend would first compile
a shared-memory all-reduce (minutes on a small machine); the scenarios mark that
op incompatible so that DeepSpeed uses gloo directly (DeepSpeed keeps the
compatibility table in ``deepspeed.ops.__compatible_ops__`` for such edits).
"""

from __future__ import annotations

import os
import sys
from typing import Dict, List

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(__file__))
import _dist_helpers as h  # noqa: E402  (the shared schedules and data)

STEPS = h.STEPS
CLIP = 0.05  # well below the gradient norms here, so every window is clipped
# One process: rank 1's counts of SCHEDULE (rank 0 has a window of 0 items, which a single
# process cannot step); still unequal counts, empty micro-batches and partial windows.
SINGLE_SCHEDULE = [[per_rank[1]] for per_rank in h.SCHEDULE]


def schedule_for(world_size: int):
    return h.SCHEDULE if world_size > 1 else SINGLE_SCHEDULE


def make_model() -> nn.Module:
    """The float32 model the engines train; the reference starts from the same (rounded) weights."""
    return h.make_model().float()


# ------------------------------------------------------------ the reference
def reference(world_size: int, schedule=h.SCHEDULE, clip: float = 0.0, windows=None) -> Dict[str, list]:
    """Plain PyTorch, float64, full batch per window: parameters after every window, and each window's mean loss.

    ``windows``: the windows of ``schedule`` to train on (default all), e.g. without one a run dropped.
    """
    model = make_model().double()
    opt = torch.optim.SGD(model.parameters(), lr=h.LR, momentum=h.MOMENTUM)
    params, losses = [], []
    for w in (range(len(schedule)) if windows is None else windows):
        x, y = h.union(w, world_size, schedule)
        loss = ((model(x) - y) ** 2).sum(dim=1).mean()
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        opt.zero_grad()
        params.append([p.detach().clone() for p in model.parameters()])
        losses.append(loss.item())
    return {"params": params, "losses": losses}


# ------------------------------------------------------------ the engine side
def _engine(stage: int, clip: float = 0.0):
    import deepspeed

    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=h.LR, momentum=h.MOMENTUM)
    config = {
        "train_micro_batch_size_per_gpu": h.PAD,
        "gradient_accumulation_steps": STEPS,
        "gradient_clipping": clip,  # DeepSpeed's default is 1.0, which clips silently
        "zero_optimization": {"stage": stage},
        "zero_allow_untested_optimizer": True,  # a torch optimizer under ZeRO
        "steps_per_print": 10**9,
    }
    engine, *_ = deepspeed.initialize(model=model, optimizer=opt, config=config)
    return engine


def full_params(engine) -> List[torch.Tensor]:
    """The engine's full fp32 parameters (a collective under ZeRO: every rank calls it)."""
    from deepspeed.utils import safe_get_full_fp32_param

    if engine.zero_optimization_stage() == 0:
        return [p.detach().clone() for p in engine.module.parameters()]
    return [safe_get_full_fp32_param(p).detach().clone() for p in engine.module.parameters()]


def _data(w: int, rank: int, m: int, count: int):
    return [t.float() for t in h.micro_batch(w, rank, m, count)]


def run_accumulator(stage: int, rank: int, schedule=h.SCHEDULE, clip: float = 0.0) -> dict:
    import gradguard as gg

    engine = _engine(stage, clip)
    acc = gg.Accumulator(engine, STEPS)
    params, losses = [], []
    for w, per_rank in enumerate(schedule):
        counts = per_rank[rank]
        for m, count in enumerate(counts):
            x, y, mask = _data(w, rank, m, count)
            acc.backward(h.masked_loss(engine, x, y, mask), count=count)
            stepped = acc.step()
        if len(counts) < STEPS:
            stepped = acc.flush()
        assert stepped, f"window {w} did not step"
        params.append(full_params(engine))
        losses.append(acc.loss)
    return {"params": params, "losses": losses, "optimizer_steps": acc.optimizer_steps, "engine_steps": engine.global_steps}


def run_engine_default(stage: int, rank: int, schedule=h.NAIVE_SCHEDULE) -> dict:
    """DeepSpeed's own accumulation: the loop from its documentation, every micro-batch a mean loss."""
    engine = _engine(stage)
    params = []
    for w, per_rank in enumerate(schedule):
        for m, count in enumerate(per_rank[rank]):
            x, y, mask = _data(w, rank, m, count)
            engine.backward(h.masked_loss(engine, x, y, mask))
            engine.step()
        params.append(full_params(engine))
    return {"params": params}


def count_collectives(stage: int, rank: int) -> dict:
    """All-reduces (and reduce-scatters, all-gathers) per window: the engine's own accumulation vs the Accumulator."""
    import torch.distributed as dist

    import gradguard as gg

    names = ("all_reduce", "reduce_scatter_tensor", "all_gather_into_tensor", "reduce_scatter", "all_gather",
             "all_reduce_coalesced", "broadcast")
    counts = {"n": 0}
    originals = {n: getattr(dist, n) for n in names if hasattr(dist, n)}

    def counting(fn):
        def wrapper(*args, **kwargs):
            counts["n"] += 1
            return fn(*args, **kwargs)
        return wrapper

    out = {}
    for kind in ("engine", "gradguard"):
        engine = _engine(stage)
        acc = gg.Accumulator(engine, STEPS) if kind == "gradguard" else None
        for n, fn in originals.items():
            setattr(dist, n, counting(fn))
        counts["n"] = 0
        try:
            windows = h.NAIVE_SCHEDULE
            for w, per_rank in enumerate(windows):
                for m, count in enumerate(per_rank[rank]):
                    x, y, mask = _data(w, rank, m, count)
                    loss = h.masked_loss(engine, x, y, mask)
                    if acc is None:
                        engine.backward(loss)
                        engine.step()
                    else:
                        acc.backward(loss, count=count)
                        acc.step()
        finally:
            for n, fn in originals.items():
                setattr(dist, n, fn)
        out[kind] = counts["n"] / len(h.NAIVE_SCHEDULE)
    return out


def refusals(stage: int, rank: int) -> Dict[str, str]:
    """What the Accumulator refuses on a real engine: each case's GradguardError message ('' if none was raised)."""
    import gradguard as gg

    engine = _engine(stage)
    cases = {
        "steps_mismatch": lambda: gg.Accumulator(engine, STEPS + 1),
        "max_grad_norm": lambda: gg.Accumulator(engine, STEPS, max_grad_norm=1.0),
        "scheduler": lambda: gg.Accumulator(engine, STEPS, scheduler=torch.optim.lr_scheduler.StepLR(
            torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1), 1)),
    }
    out = {}
    for name, make in cases.items():
        try:
            make()
            out[name] = ""
        except gg.GradguardError as exc:
            out[name] = str(exc)
    acc = gg.Accumulator(engine, STEPS)
    x, y, mask = _data(0, rank, 0, 2)
    acc.backward(h.masked_loss(engine, x, y, mask), count=2)
    acc.step()
    try:
        acc.state_dict()
        out["state_dict_mid_window"] = ""
    except gg.GradguardError as exc:
        out["state_dict_mid_window"] = str(exc)
    return out


def run_skip(stage: int, rank: int) -> dict:
    """nonfinite="skip": a NaN loss on rank 0 in window 0 drops that window on every rank, and training goes on."""
    import gradguard as gg

    engine = _engine(stage)
    acc = gg.Accumulator(engine, STEPS, nonfinite="skip")
    params = []
    for w, per_rank in enumerate(h.NAIVE_SCHEDULE):
        for m, count in enumerate(per_rank[rank]):
            x, y, mask = _data(w, rank, m, count)
            if (w, m, rank) == (0, 1, 0):
                x[0] = float("nan")
            acc.backward(h.masked_loss(engine, x, y, mask), count=count)
            acc.step()
        params.append(full_params(engine))
    return {"params": params, "skipped": acc.skipped_windows, "steps": acc.optimizer_steps}


# One process: a first window whose every micro-batch has 0 items (the engine runs no backward pass
# in it), then two windows of SINGLE_SCHEDULE's counts.
EMPTY_FIRST_SCHEDULE = [[[0] * STEPS]] + SINGLE_SCHEDULE[:2]


def run_empty_window(stage: int, rank: int) -> dict:
    """One process: the empty window ends dropped (no error, nothing stepped) and the engine trains on after it."""
    import gradguard as gg

    engine = _engine(stage)
    acc = gg.Accumulator(engine, STEPS)
    params, stepped, error = [], [], ""
    try:
        for w, per_rank in enumerate(EMPTY_FIRST_SCHEDULE):
            counts = per_rank[rank]
            for m, count in enumerate(counts):
                x, y, mask = _data(w, rank, m, count)
                acc.backward(h.masked_loss(engine, x, y, mask), count=count)
                last = acc.step()
            if len(counts) < STEPS:
                last = acc.flush()
            stepped.append(last)
            params.append(full_params(engine))
    except Exception as exc:  # recorded for the test's message
        error = f"{type(exc).__name__}: {exc}"
    return {"params": params, "stepped": stepped, "skipped": acc.skipped_windows, "error": error,
            "engine_steps": engine.global_steps}


def run_resume(rank: int, world_size: int) -> dict:
    """Stage 0: stop in the middle of window 1, save the Accumulator, load it into a new one, go on."""
    import copy

    import gradguard as gg

    engine = _engine(0)
    acc = gg.Accumulator(engine, STEPS)
    schedule = schedule_for(world_size)
    params = []
    for w, per_rank in enumerate(schedule):
        counts = per_rank[rank]
        for m, count in enumerate(counts):
            if (w, m) == (1, 2):
                state = copy.deepcopy(acc.state_dict())
                engine.zero_grad()  # what a restarted process has: no gradients
                acc = gg.Accumulator(engine, STEPS)
                acc.load_state_dict(state)
            x, y, mask = _data(w, rank, m, count)
            acc.backward(h.masked_loss(engine, x, y, mask), count=count)
            acc.step()
        if len(counts) < STEPS:
            acc.flush()
        params.append(full_params(engine))
    return {"params": params}


def run_accelerate(rank: int, world_size: int, stage: int = 2) -> dict:
    """HF Accelerate with a DeepSpeed plugin: accelerator= is refused with directions; the prepared engine is exact."""
    from accelerate import Accelerator
    from accelerate.utils import DeepSpeedPlugin

    import gradguard as gg

    plugin = DeepSpeedPlugin(zero_stage=stage, gradient_accumulation_steps=STEPS, gradient_clipping=0.0)
    plugin.deepspeed_config.update(train_micro_batch_size_per_gpu=h.PAD, train_batch_size=h.PAD * STEPS * world_size,
                                   zero_allow_untested_optimizer=True,
                                   gradient_clipping=0.0)  # the plugin drops its own 0.0, and DeepSpeed's default clips
    accelerator = Accelerator(deepspeed_plugin=plugin)
    model = make_model()
    engine, opt = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=h.LR, momentum=h.MOMENTUM))
    try:
        gg.Accumulator(opt, STEPS, accelerator=accelerator, model=engine)
        refusal = ""
    except gg.GradguardError as exc:
        refusal = str(exc)
    acc = gg.Accumulator(engine, STEPS)  # what the refusal says to do
    params = []
    for w, per_rank in enumerate(schedule_for(world_size)):
        counts = per_rank[rank]
        for m, count in enumerate(counts):
            x, y, mask = _data(w, rank, m, count)
            acc.backward(h.masked_loss(engine, x, y, mask), count=count)
            acc.step()
        if len(counts) < STEPS:
            acc.flush()
        params.append(full_params(engine))
    return {"refusal": refusal, "params": params, "distributed_type": str(accelerator.distributed_type)}


# A clearing or in-place edit of the window's gradients that the Accumulator did not make, at the top of every
# iteration (a ported hand loop's zero_grad()), through each object a loop can reach.
STRAY_KINDS = ("engine.zero_grad", "optimizer.zero_grad", "module.zero_grad", "grad.mul_")


def _stray(kind: str, engine) -> None:
    if kind == "engine.zero_grad":
        engine.zero_grad()
    elif kind == "optimizer.zero_grad":  # the ZeRO optimizer deepspeed.initialize returned
        engine.optimizer.zero_grad()
    elif kind == "module.zero_grad":
        engine.module.zero_grad()
    elif kind == "grad.mul_":
        for p in engine.module.parameters():
            if p.grad is not None:
                p.grad.mul_(2)


def run_stray(stage: int, rank: int, world_size: int) -> dict:
    """Per kind (and None, the control): the same loop with the stray call on the last rank; what each window did."""
    import gradguard as gg

    schedule = schedule_for(world_size)[:3]
    out = {}
    for kind in (None, *STRAY_KINDS):
        engine = _engine(stage)
        acc = gg.Accumulator(engine, STEPS)
        init = full_params(engine)
        errors = []
        for w, per_rank in enumerate(schedule):
            counts = per_rank[rank]
            for m, count in enumerate(counts):
                if kind is not None and rank == world_size - 1:
                    _stray(kind, engine)
                x, y, mask = _data(w, rank, m, count)
                acc.backward(h.masked_loss(engine, x, y, mask), count=count)
                try:
                    acc.step() if m < len(counts) - 1 or len(counts) == STEPS else acc.flush()
                except gg.GradguardError as exc:
                    errors.append((w, str(exc)))
        out[kind] = {"errors": errors, "steps": acc.optimizer_steps, "skipped": acc.skipped_windows,
                     "init": init, "params": full_params(engine)}
    return out


def main(out_dir: str, stages: List[int]) -> None:
    import deepspeed
    import torch.distributed as dist

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False  # gloo, no compile (see the module docstring)
    deepspeed.utils.logger.setLevel("WARNING")
    torch.set_num_threads(1)
    deepspeed.init_distributed("gloo")
    rank = dist.get_rank()
    world_size = dist.get_world_size()
    for stage in stages:
        result = {
            "exact": run_accumulator(stage, rank, schedule=schedule_for(world_size)),
            "naive": run_engine_default(stage, rank),
            "refusals": refusals(stage, rank),
            "stray": run_stray(stage, rank, world_size),
        }
        if world_size > 1:  # the rest once, with two processes
            result["gradguard"] = run_accumulator(stage, rank, schedule=h.NAIVE_SCHEDULE)
            result["clipped"] = run_accumulator(stage, rank, schedule=h.NAIVE_SCHEDULE, clip=CLIP)
            result["collectives"] = count_collectives(stage, rank)
            result["skip"] = run_skip(stage, rank)
            if stage == 0:
                result["resume"] = run_resume(rank, world_size)
        else:
            result["empty_window"] = run_empty_window(stage, rank)
        torch.save(result, os.path.join(out_dir, f"stage{stage}-rank{rank}.pt"))
    torch.save(run_accelerate(rank, world_size), os.path.join(out_dir, f"accelerate-rank{rank}.pt"))
    dist.barrier()


def report(out_dir: str, world_size: int, stages: List[int]) -> None:
    """Print the first window's update error (relative to the largest reference update) of each run in out_dir."""
    start = [p.detach().double() for p in make_model().parameters()]
    ref = reference(world_size, h.NAIVE_SCHEDULE)["params"][0]
    largest = max((r - s).abs().max().item() for r, s in zip(ref, start))

    def error(params) -> float:
        return max((p.double() - r).abs().max().item() for p, r in zip(params, ref)) / largest

    for stage in stages:
        out = torch.load(os.path.join(out_dir, f"stage{stage}-rank0.pt"), weights_only=False)
        line = f"stage {stage}, {world_size} process(es): DeepSpeed's own accumulation {error(out['naive']['params'][0]):.3f}"
        if "gradguard" in out:
            line += f", gg.Accumulator(engine) {error(out['gradguard']['params'][0]):.1e}"
        print(line)


if __name__ == "__main__":
    if sys.argv[1] == "--report":  # python tests/_deepspeed_helpers.py --report OUT WORLD_SIZE STAGES...
        report(sys.argv[2], int(sys.argv[3]), [int(s) for s in sys.argv[4:]])
    else:
        main(sys.argv[1], [int(s) for s in sys.argv[2:]])
