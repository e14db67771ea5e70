"""The watch on a GPU: findings as on the CPU, and not one device sync while training.

``torch.cuda.set_sync_debug_mode("error")`` turns every synchronising call
(``.item()``, ``.cpu()``, a device-to-host copy) into an error, so a watch that
read a gradient or an item count during the loop would fail here. Skipped
without CUDA.
"""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import gradguard as gg

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def _model():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 50)).cuda()
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3)


def _train(model, opt, pads, accum, zero_grad=True):
    for i, pad in enumerate(pads):
        x = torch.randn(64, 32, device="cuda")
        targets = torch.randint(0, 50, (64,), device="cuda")
        targets[64 - pad:] = -100  # padding: the mean runs over 64 - pad tokens
        loss = F.cross_entropy(model(x), targets, ignore_index=-100)
        (loss / accum).backward()
        if (i + 1) % accum == 0:
            opt.step()
            if zero_grad:
                opt.zero_grad()


def _no_sync(fn, *args, **kwargs):
    """Run ``fn`` with every device synchronisation turned into an error."""
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        fn(*args, **kwargs)
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_no_device_sync_and_counts_read_at_the_end():
    with gg.watch(mode="record") as w:
        _no_sync(_train, *_model(), pads=[0, 0, 0, 0] * 3, accum=4)
    assert w.findings == []
    with gg.watch(mode="record") as w:
        _no_sync(_train, *_model(), pads=[0, 30, 5, 60] * 2, accum=4)
        assert w.findings == []  # the token counts live on the GPU: not read during training ...
    assert [f.code for f in w.findings] == ["GG105"]  # ... but once, when the watch ends
    assert "(64, 34, 59, 4)" in w.findings[0].message


def test_stale_gradient_on_gpu():
    with gg.watch(mode="record") as w:
        _no_sync(_train, *_model(), pads=[0] * 4, accum=1, zero_grad=False)
    assert [f.code for f in w.findings] == ["GG101"]
