"""Host reads per accumulation window: how often each loop makes the CPU wait for the device.

On a GPU every read of a device value into Python (``.item()``, ``bool(t)``,
``float(t)``, ``tensor.tolist()``) stalls the CPU until the GPU catches up. This
script counts them on CPU with a ``TorchDispatchMode``: every
``aten._local_scalar_dense`` call (what ``.item()``, ``bool()`` and ``float()``
dispatch to) plus every copy to the host (``aten._to_copy`` to ``cpu``, how a
``tensor.tolist()`` of a GPU tensor crosses). The Accumulator is made to read its
window's losses as it does on an accelerator (stacked, one copy to the host): with
losses in host memory it reads each with ``item()`` at the window's end instead,
which is no transfer and no sync there.

    python benchmarks/count_host_reads.py            # the table, 4 and 8 micro-batches per window

Model: Linear(16, 16) -> Tanh -> Linear(16, 1) (4 parameter tensors), micro-batches of 8 rows,
AdamW (whose CPU step reads each parameter's step count: "AdamW's own"), clipping at 1.0.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
import gradguard as gg  # noqa: E402
import gradguard.accumulate  # noqa: E402

# Count the reads an accelerator would make: the window's losses as one stacked transfer.
gradguard.accumulate._in_host_memory = lambda tensors: False


class HostReads(TorchDispatchMode):
    """Counts host reads: ``aten._local_scalar_dense`` calls and copies to the CPU."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._local_scalar_dense.default:
            self.count += 1
        elif func is torch.ops.aten._to_copy.default and kwargs.get("device") is not None and torch.device(kwargs["device"]).type == "cpu":
            self.count += 1
        return func(*args, **kwargs)


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 1))


def _micro_batches(steps, windows):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(8, 16, generator=g), torch.randn(8, 1, generator=g)) for _ in range(steps * windows)]


def _mse(model, x, y):
    return nn.functional.mse_loss(model(x), y)


def hand_written(steps, scaler=False):
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sc = torch.amp.GradScaler("cpu") if scaler else None

    def window(mbs):
        for x, y in mbs:
            loss = _mse(model, x, y) / steps
            (sc.scale(loss) if sc else loss).backward()
        if sc:
            sc.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if sc:
            sc.step(opt)
            sc.update()
        else:
            opt.step()
        opt.zero_grad(set_to_none=True)

    return window


def accumulator(steps, count="int", reduction="mean", scaler=False, **kwargs):
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    acc = gg.Accumulator(opt, steps=steps, max_grad_norm=1.0, scaler=torch.amp.GradScaler("cpu") if scaler else None, **kwargs)

    def window(mbs):
        for x, y in mbs:
            loss = _mse(model, x, y) * (len(x) if reduction == "sum" else 1)
            n = {"int": len(x), "tensor": torch.tensor(len(x)), "none": None}[count]
            acc.backward(loss, count=n, reduction=reduction)
            acc.step()

    return window


def accumulate_batch_loop(steps, with_acc):
    """One batch of 8 * steps rows per window, split into micro-batches of 8 by accumulate_batch."""
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    acc = gg.Accumulator(opt, steps=1, max_grad_norm=1.0) if with_acc else None

    def window(mbs):
        batch = (torch.cat([x for x, _ in mbs]), torch.cat([y for _, y in mbs]))
        gg.accumulate_batch(model, lambda m, b: _mse(m, *b), batch, micro_batch_size=8, acc=acc)
        if acc is not None:
            acc.step()
        else:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)

    return window


def reads_per_window(make, steps, windows=3, **kwargs) -> float:
    """Host reads per window, counted over ``windows`` windows after one untimed warm-up window."""
    window = make(steps, **kwargs)
    mbs = _micro_batches(steps, windows + 1)
    window(mbs[:steps])
    with HostReads() as counter:
        for w in range(1, windows + 1):
            window(mbs[w * steps:(w + 1) * steps])
    return counter.count / windows


LOOPS = [
    ("hand-written, AdamW + clipping", hand_written, {}),
    ("`Accumulator`, default, int counts", accumulator, {}),
    ("`Accumulator`, count=None", accumulator, {"count": "none"}),
    ("`Accumulator`, count a 0-dim tensor, mean loss", accumulator, {"count": "tensor"}),
    ("`Accumulator`, count a 0-dim tensor, `reduction=\"sum\"`", accumulator, {"count": "tensor", "reduction": "sum"}),
    ("`Accumulator`, `nonfinite=\"skip\"`", accumulator, {"nonfinite": "skip"}),
    ("`Accumulator`, `nonfinite=\"raise_early\"` (opt-in check per micro-batch)", accumulator, {"nonfinite": "raise_early"}),
    ("hand-written with GradScaler", hand_written, {"scaler": True}),
    ("`Accumulator` with GradScaler", accumulator, {"scaler": True}),
    ("`accumulate_batch` (no `acc`), AdamW + clipping", accumulate_batch_loop, {"with_acc": False}),
    ("`accumulate_batch` with `acc`", accumulate_batch_loop, {"with_acc": True}),
]


def main() -> int:
    print("| loop | reads per window, 4 micro-batches | 8 micro-batches |")
    print("|---|---|---|")
    for name, make, kwargs in LOOPS:
        r4, r8 = (reads_per_window(make, s, **kwargs) for s in (4, 8))
        print(f"| {name} | {r4:g} | {r8:g} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
