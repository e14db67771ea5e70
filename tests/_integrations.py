"""Shared pieces of the framework integration tests (importable by spawned ranks).

The scenario: micro-batches of unequal sizes (3..8 items) of a small float64
regression model, K=4 micro-batches per optimizer step, 10 micro-batches per
epoch per rank (windows of 4, 4 and a final 2). The independent reference is
plain PyTorch on the full window (all ranks' items concatenated) in float64:
the mean loss, its gradient, optional norm clipping, an SGD-with-momentum step.

``spawn(fn, world_size)`` runs ``fn(rank, world_size)`` in fresh processes with
the environment variables a launcher (torchrun, ``accelerate launch``) sets,
so that the frameworks set up their own gloo process groups.
"""

from __future__ import annotations

import os
import socket
import tempfile
import time
import traceback
from typing import Callable, List, Optional

import torch
import torch.multiprocessing as mp
from torch import nn
from torch.nn import functional as F

K = 4
BATCHES = 10
IN, HID, OUT = 3, 5, 2
LR, MOMENTUM = 0.5, 0.9
CLIP = 0.05  # small enough that every window is clipped


def counts(rank: int, n: int = BATCHES) -> List[int]:
    return [3 + (i * 5 + rank * 3) % 6 for i in range(n)]


def batches(rank: int, n: int = BATCHES, equal: bool = False):
    """``n`` micro-batches ``(x, y)`` of unequal sizes (all of 4 items if ``equal``), float64."""
    g = torch.Generator().manual_seed(100 + rank)
    return [(torch.randn(c, IN, generator=g, dtype=torch.float64), torch.randn(c, OUT, generator=g, dtype=torch.float64))
            for c in ([4] * n if equal else counts(rank, n))]


def make_model() -> nn.Module:
    torch.manual_seed(0)
    f32 = torch.float32  # the same initial values whatever the default dtype
    return nn.Sequential(nn.Linear(IN, HID, dtype=f32), nn.Tanh(), nn.Linear(HID, OUT, dtype=f32)).double()


def loss_fn(model, x, y):
    return F.mse_loss(model(x), y)  # the mean over the micro-batch's items


def reference_params(per_rank: List[list], clip: Optional[float], k: int = K, epochs: int = 1) -> List[torch.Tensor]:
    """Parameters after plain full-batch float64 training over the same windows (independent of gradguard)."""
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    n = len(per_rank[0])
    for _ in range(epochs):
        for start in range(0, n, k):
            xs = torch.cat([b[0] for rank in per_rank for b in rank[start:start + k]])
            ys = torch.cat([b[1] for rank in per_rank for b in rank[start:start + k]])
            opt.zero_grad()
            loss_fn(model, xs, ys).backward()
            if clip is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            opt.step()
    return [p.detach().clone() for p in model.parameters()]


def rel_change_error(got: List[torch.Tensor], want: List[torch.Tensor]) -> float:
    """Largest ``max|Δgot - Δwant| / max|Δwant|`` over parameters, Δ = change from the initial model."""
    init = [p.detach() for p in make_model().parameters()]
    worst = 0.0
    for g, w, p0 in zip(got, want, init):
        dg, dw = g.detach().double().cpu() - p0, w.double() - p0
        worst = max(worst, float((dg - dw).abs().max() / dw.abs().max()))
    return worst


# ------------------------------------------------------------------ processes
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world_size: int, port: int, out_dir: str, fn: Callable, kwargs: dict) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_WORLD_SIZE=str(world_size), NODE_RANK="0", GROUP_RANK="0")
    torch.set_num_threads(1)  # two ranks on a small shared machine
    try:
        result = {"ok": True, "value": fn(rank, world_size, **kwargs)}
    except BaseException:
        result = {"ok": False, "error": traceback.format_exc()}
    torch.save(result, os.path.join(out_dir, f"rank{rank}.pt"))
    os._exit(0)  # skip C++ teardown of gloo threads (can abort an exiting process on a loaded box)


def spawn(fn: Callable, world_size: int = 2, timeout: float = 240.0, **kwargs) -> list:
    """Run ``fn(rank, world_size, **kwargs)`` in ``world_size`` fresh processes; the return values, by rank."""
    with tempfile.TemporaryDirectory() as out_dir:
        ctx = mp.start_processes(_worker, args=(world_size, _free_port(), out_dir, fn, kwargs), nprocs=world_size,
                                 join=False, start_method="spawn")
        deadline = time.monotonic() + timeout
        try:
            while not ctx.join(timeout=max(0.1, deadline - time.monotonic())):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"ranks did not finish within {timeout} s")
        finally:
            for p in ctx.processes:
                if p.is_alive():
                    p.kill()
        results = [torch.load(os.path.join(out_dir, f"rank{r}.pt"), weights_only=False) for r in range(world_size)]
    for r, res in enumerate(results):
        if not res["ok"]:
            raise AssertionError(f"rank {r} failed:\n{res['error']}")
    return [res["value"] for res in results]
