"""Run real 2-rank gloo process groups from pytest, and the scenarios they run.

``run_ranks(fn, ...)`` spawns ``world_size`` processes on a free port, each
inits a gloo group, runs ``fn(rank, world_size, **kwargs)`` and sends back what
it returns (via ``torch.save`` into a temporary folder). A deadline kills the
ranks if a collective hangs, so a hang fails the test instead of blocking CI.

The scenario functions live here (not in the test modules) so that the spawned
processes can import them.
"""

from __future__ import annotations

import os
import socket
import tempfile
import time
import traceback
from datetime import timedelta
from typing import Callable, Dict, List, Sequence

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

import gradguard as gg

# Counts of items per micro-batch, per window, per rank (steps=3). The last two
# windows are partial (stepped by flush()). Designed to hit every edge:
# an empty non-final micro-batch (W1, rank 1), an empty window-ending micro-batch
# (W2, rank 0), a rank with 0 items in the whole window (W3, rank 0), a partial
# window whose last micro-batch is empty on one rank (W4), and a partial window
# where one rank has nothing at all (W5).
STEPS = 3
SCHEDULE: List[List[List[int]]] = [
    [[3, 1, 2], [5, 0, 4]],
    [[2, 2, 0], [1, 3, 6]],
    [[0, 0, 0], [2, 1, 3]],
    [[4, 1], [2, 0]],
    [[0], [3]],
]
# The negative control: unequal counts, no empty micro-batch (a naive 0/0 would be NaN, not merely wrong).
NAIVE_SCHEDULE: List[List[List[int]]] = [[[3, 1, 2], [5, 2, 4]], [[1, 6, 2], [4, 3, 1]]]
PAD = 6  # micro-batches are padded to PAD rows; a mask marks the real items
IN, OUT = 3, 2
LR, MOMENTUM = 0.1, 0.9


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world_size: int, port: int, out_dir: str, fn: Callable, kwargs: dict) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)  # two ranks on a shared 2-core box
    dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=timedelta(seconds=60))
    try:
        result = {"ok": True, "value": fn(rank, world_size, **kwargs)}
    except BaseException:  # report any failure to the parent with its traceback
        result = {"ok": False, "error": traceback.format_exc()}
    torch.save(result, os.path.join(out_dir, f"rank{rank}.pt"))
    dist.destroy_process_group()
    # Leave without running C++ static destructors: on a loaded machine a gloo or DDP
    # background thread still being torn down can abort the exiting process ("terminate
    # called without an active exception") after the work and its result are complete.
    os._exit(0)


def run_ranks(fn: Callable, world_size: int = 2, timeout: float = 90.0, **kwargs) -> List:
    """Run ``fn(rank, world_size, **kwargs)`` on ``world_size`` gloo ranks; its return values, by rank."""
    with tempfile.TemporaryDirectory() as out_dir:
        ctx = mp.start_processes(
            _worker, args=(world_size, free_port(), out_dir, fn, kwargs), nprocs=world_size, join=False, start_method="spawn"
        )
        deadline = time.monotonic() + timeout
        while not ctx.join(timeout=max(0.1, deadline - time.monotonic())):
            if time.monotonic() > deadline:
                for p in ctx.processes:
                    if p.is_alive():
                        p.kill()
                raise TimeoutError(f"{fn.__name__} did not finish on {world_size} ranks within {timeout}s (a hung collective?)")
        results = [torch.load(os.path.join(out_dir, f"rank{r}.pt"), weights_only=False) for r in range(world_size)]
    errors = [f"rank {r}:\n{res['error']}" for r, res in enumerate(results) if not res["ok"]]
    if errors:
        raise AssertionError("\n".join(errors))
    return [res["value"] for res in results]


# ------------------------------------------------------------------ problem
def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(IN, 5), nn.Tanh(), nn.Linear(5, OUT)).double()


def micro_batch(window: int, rank: int, micro: int, count: int):
    """Deterministic data: (x, y, mask) padded to PAD rows, ``count`` real items."""
    g = torch.Generator().manual_seed(1000 * window + 100 * rank + micro)
    x = torch.randn(PAD, IN, generator=g, dtype=torch.float64)
    y = torch.randn(PAD, OUT, generator=g, dtype=torch.float64)
    mask = torch.zeros(PAD, dtype=torch.float64)
    mask[:count] = 1
    return x, y, mask


def masked_loss(model: nn.Module, x, y, mask) -> torch.Tensor:
    """Mean over the real items of the per-item squared error: 0/0 (NaN, NaN gradient) when empty."""
    per_item = ((model(x) - y) ** 2).sum(dim=1)
    return (per_item * mask).sum() / mask.sum()


def union(window: int, world_size: int, schedule=SCHEDULE):
    """All ranks' real items of a window, concatenated (the full batch)."""
    xs, ys = [], []
    for rank in range(world_size):
        for micro, count in enumerate(schedule[window][rank]):
            x, y, _ = micro_batch(window, rank, micro, count)
            xs.append(x[:count])
            ys.append(y[:count])
    return torch.cat(xs), torch.cat(ys)


def reference(world_size: int = 2, schedule=SCHEDULE) -> Dict[str, list]:
    """Single process, full batch per window, float64: grads before each step, final params, losses."""
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    grads, losses = [], []
    for w in range(len(schedule)):
        x, y = union(w, world_size, schedule)
        loss = ((model(x) - y) ** 2).sum(dim=1).mean()
        loss.backward()
        grads.append([p.grad.clone() for p in model.parameters()])
        losses.append(loss.item())
        opt.step()
        opt.zero_grad()
    return {"grads": grads, "params": [p.detach().clone() for p in model.parameters()], "losses": losses}


def _full(t: torch.Tensor) -> torch.Tensor:
    # FSDP2 gradients and parameters are DTensors: gather (a collective, same order on every rank).
    full = t.full_tensor() if hasattr(t, "full_tensor") else t.detach().clone()
    return full.cpu()  # results travel to the parent process


def _train(rank: int, world_size: int, model: nn.Module, sync_model, *, naive: bool = False, on_micro=None, schedule=SCHEDULE, device="cpu"):
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    grads: list = []
    opt.register_step_pre_hook(lambda o, a, k: grads.append([_full(p.grad) for p in model.parameters()]))
    acc = gg.Accumulator(opt, STEPS, model=sync_model)
    losses = []
    for w, per_rank in enumerate(schedule):
        counts = per_rank[rank]
        for m, count in enumerate(counts):
            x, y, mask = (t.to(device) for t in micro_batch(w, rank, m, count))
            if naive:  # the common scheme: mean loss / steps, DDP syncing the window's last micro-batch
                last = m == len(counts) - 1
                ctx = sync_model.no_sync() if not last else _null()
                with ctx:
                    (masked_loss(model, x, y, mask) / STEPS).backward()
                if last:
                    opt.step()
                    opt.zero_grad()
                continue
            with acc.microbatch():
                acc.backward(masked_loss(model, x, y, mask), count=count)
                if on_micro is not None:
                    on_micro(w, m)
            stepped = acc.step()
        if not naive:
            if len(counts) < STEPS:
                stepped = acc.flush()
            assert stepped, f"window {w} did not step"
            losses.append(acc.loss)
    return {"grads": grads, "params": [_full(p) for p in model.parameters()], "losses": losses}


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# ---------------------------------------------------------------- scenarios
def scenario_ddp(rank: int, world_size: int, device: str = "cpu") -> dict:
    """gradguard under DDP, with collectives counted by a comm hook."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(make_model().to(device))
    calls = {"n": 0}

    def counting_allreduce(state, bucket):
        calls["n"] += 1
        return default_hooks.allreduce_hook(state, bucket)

    model.register_comm_hook(dist.group.WORLD, counting_allreduce)
    per_micro: list = []  # (window, micro, all-reduces this micro-batch's backward started)
    seen = {"n": 0}

    def on_micro(w, m):
        per_micro.append((w, m, calls["n"] - seen["n"]))
        seen["n"] = calls["n"]

    out = _train(rank, world_size, model, model, on_micro=on_micro, device=device)
    out["per_micro"] = per_micro
    return out


def scenario_ddp_naive(rank: int, world_size: int) -> dict:
    from torch.nn.parallel import DistributedDataParallel as DDP

    naive_model, gg_model = DDP(make_model()), DDP(make_model())
    return {
        "naive": _train(rank, world_size, naive_model, naive_model, naive=True, schedule=NAIVE_SCHEDULE),
        "gradguard": _train(rank, world_size, gg_model, gg_model, schedule=NAIVE_SCHEDULE),
    }


def _wrap(kind: str, world_size: int):
    """A fresh model wrapped for ``kind`` ("ddp" or "fsdp2"), and what to pass as Accumulator(model=...)."""
    model = make_model()
    if kind == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(model)
        return model, model.module, model
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (world_size,))
    fully_shard(model[0], mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, model, model  # the default sync: deferred reduce-scatter


def scenario_resume(rank: int, world_size: int, kind: str) -> dict:
    """Stop in the middle of window 1, save per rank, rebuild everything, resume."""
    import io

    def build():
        model, inner, sync_model = _wrap(kind, world_size)
        opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
        return model, inner, opt, gg.Accumulator(opt, STEPS, model=sync_model)

    model, inner, opt, acc = build()
    schedule = [(w, m, c) for w, per_rank in enumerate(SCHEDULE[:3]) for m, c in enumerate(per_rank[rank])]
    stop = 5  # window 1, micro-batch 2: gradients of micro-batches 0 and 1 in flight
    for i, (w, m, count) in enumerate(schedule):
        if i == stop:
            buf = io.BytesIO()
            # Each rank saves its own in-flight gradients (DDP: unreduced; FSDP2: its shard).
            torch.save({"model": inner.state_dict(), "opt": opt.state_dict(), "acc": acc.state_dict()}, buf)
            buf.seek(0)
            state = torch.load(buf, weights_only=kind == "ddp")
            model, inner, opt, acc = build()
            inner.load_state_dict(state["model"])
            opt.load_state_dict(state["opt"])
            acc.load_state_dict(state["acc"])
        x, y, mask = micro_batch(w, rank, m, count)
        with acc.microbatch():
            acc.backward(masked_loss(model, x, y, mask), count=count)
        acc.step()
    return {"params": [_full(p) for p in model.parameters()]}


def scenario_fsdp2(rank: int, world_size: int, defer_reduce: bool, mixed_precision: bool = False) -> dict:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    from gradguard.distributed import FSDP2Sync

    model = make_model()
    mesh = init_device_mesh("cpu", (world_size,))
    # float32 compute, float64 reduction and master weights: FSDP then keeps deferred
    # gradients in its own float64 buffer instead of the parameter's .grad.
    mp = MixedPrecisionPolicy(param_dtype=torch.float32, reduce_dtype=torch.float64) if mixed_precision else MixedPrecisionPolicy()
    fully_shard(model[0], mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    sync = FSDP2Sync(model, defer_reduce=defer_reduce)
    out = _train(rank, world_size, model, sync)
    out["defers_sync"] = sync.defers_sync
    return out


def reference_prefix(windows: Sequence[int], world_size: int = 2) -> list:
    """Final params of the full-batch reference over the given windows (for the resume test)."""
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    for w in windows:
        x, y = union(w, world_size)
        ((model(x) - y) ** 2).sum(dim=1).mean().backward()
        opt.step()
        opt.zero_grad()
    return [p.detach().clone() for p in model.parameters()]


def scenario_ddp_nonfinite_skip(rank: int, world_size: int) -> dict:
    """nonfinite="skip": a NaN loss on rank 0 only must make every rank drop the window."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(make_model())
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    acc = gg.Accumulator(opt, STEPS, model=model, nonfinite="skip")
    for w in range(2):
        for m in range(STEPS):
            x, y, mask = micro_batch(w, rank, m, 2)
            if rank == 0 and w == 0 and m == 1:
                x = x.clone()
                x[0] = float("nan")
            with acc.microbatch():
                acc.backward(masked_loss(model, x, y, mask), count=2)
            acc.step()
    return {"params": [_full(p) for p in model.parameters()], "skipped": acc.skipped_windows, "steps": acc.optimizer_steps}


def scenario_ddp_rank_loss_reaches_nothing(rank: int, world_size: int) -> dict:
    """Window 1: rank 1's first micro-batch back-propagates a loss that reaches no parameter.

    Every rank must refuse that window at its end (one collective decides), none may hang,
    and the windows around it step as usual.
    """
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(make_model())
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    acc = gg.Accumulator(opt, STEPS, model=model)
    stray = torch.ones((), dtype=torch.float64, requires_grad=True)  # a tensor outside the model and the optimizer
    errors, after_refusal = [], None
    for w in range(3):
        for m in range(STEPS):
            x, y, mask = micro_batch(w, rank, m, 2)
            with acc.microbatch():
                loss = masked_loss(model, x, y, mask)
                if w == 1 and m == 0 and rank == 1:
                    loss = (loss.detach() * stray)  # a loss that reaches none of the model's parameters
                acc.backward(loss, count=2)
            try:
                acc.step()
            except gg.GradguardError as exc:
                errors.append(str(exc))
                after_refusal = [_full(p) for p in model.parameters()]
    return {"errors": errors, "steps": acc.optimizer_steps, "skipped": acc.skipped_windows,
            "after_refusal": after_refusal, "params": [_full(p) for p in model.parameters()]}


# A clearing or edit of the in-flight .grad that the Accumulator did not make, at the top of an
# iteration (the way a ported hand loop keeps its optimizer.zero_grad()).
def _clear(kind: str, model: nn.Module, opt) -> None:
    if kind == "zero_grad":
        opt.zero_grad()
    elif kind == "zero_grad_keep":
        opt.zero_grad(set_to_none=False)
    elif kind == "model_zero_grad":
        model.zero_grad()
    elif kind == "scale":  # an in-place edit of one parameter's gradient
        p = next(model.parameters())
        if p.grad is not None:
            p.grad.mul_(2)
    else:
        raise ValueError(kind)


def _stray_run(rank: int, world_size: int, clearing=None, on_ranks=(0, 1), windows=(0, 1, 2),
               bucket_view: bool = False, microbatch: bool = True, fsdp2_defer=None, at_micro=None,
               resume_at=None) -> dict:
    """``clearing`` at the top of each iteration (``at_micro``: of that micro-batch only) on ``on_ranks`` in
    ``windows``; ``resume_at=(window, micro)``: after that micro-batch's step(), the Accumulator's state is
    saved (deep-copied, as torch.save would) and loaded into a new Accumulator, which trains on."""
    if fsdp2_defer is None:
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = sync = DDP(make_model(), gradient_as_bucket_view=bucket_view)
    else:  # FSDP2, its sync object passed as model= (deferred or per-micro-batch reduce-scatter)
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        from gradguard.distributed import FSDP2Sync

        model = make_model()
        mesh = init_device_mesh("cpu", (world_size,))
        fully_shard(model[0], mesh=mesh)
        fully_shard(model, mesh=mesh)
        sync = FSDP2Sync(model, defer_reduce=fsdp2_defer)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    acc = gg.Accumulator(opt, STEPS, model=sync)
    errors, at_refusal = [], []
    for w, per_rank in enumerate(SCHEDULE[:3]):
        for m, count in enumerate(per_rank[rank]):
            if clearing is not None and rank in on_ranks and w in windows and at_micro in (None, m):
                _clear(clearing, model, opt)
            x, y, mask = micro_batch(w, rank, m, count)
            with (acc.microbatch() if microbatch else _null()):
                acc.backward(masked_loss(model, x, y, mask), count=count)
            try:
                acc.step()
            except gg.GradguardError as exc:
                errors.append((w, str(exc)))
                at_refusal.append([_full(p) for p in model.parameters()])
            if resume_at == (w, m):
                import copy

                state = copy.deepcopy(acc.state_dict())
                acc = gg.Accumulator(opt, STEPS, model=sync)
                acc.load_state_dict(state)
    return {"errors": errors, "steps": acc.optimizer_steps, "skipped": acc.skipped_windows, "at_refusal": at_refusal,
            "params": [_full(p) for p in model.parameters()]}


def scenario_ddp_stray_clearing(rank: int, world_size: int, configs: Sequence[dict]) -> list:
    """Several DDP runs in one process group: ``_stray_run(**config)`` for each config."""
    return [_stray_run(rank, world_size, **cfg) for cfg in configs]
