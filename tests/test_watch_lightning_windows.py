"""GG111 at run time inside Lightning's automatic optimization: a window of K' < K passes divided by K.

Real ``Trainer`` runs. ``Trainer(accumulate_grad_batches=K)`` divides every
``training_step`` loss by K and steps on the epoch's last batch, so a short last
window (or an epoch shorter than K) is applied at K'/K of its mean. The
reference is plain PyTorch in float64: the gradient of the mean loss over the
window's items. With ``lr=0`` every window sees the initial weights, so the
gradient each step applies (read in ``on_before_optimizer_step``) can be
compared with it directly: the short window's is K'/K of it (and reported), a
full window's and ``ExactAccumulation``'s are all of it (and not reported).

The watch learns K from a callback that Lightning adds to every ``Trainer``
through the ``lightning.pytorch.callbacks_factory`` entry point declared in
``pyproject.toml``. An install (``pip install -e .``) writes that declaration
into the package's metadata; where the installed metadata predates it, the
fixture below writes the same declaration, read from ``pyproject.toml``, into a
metadata folder on ``sys.path``, which is where ``importlib.metadata`` (and so
Lightning) looks for it.
"""

from __future__ import annotations

import importlib
import inspect
import json
import logging
import sys
import warnings
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

L = pytest.importorskip("lightning.pytorch")

import gradguard as gg  # noqa: E402
from gradguard.cli import main  # noqa: E402
from gradguard.integrations.lightning import ExactAccumulation  # noqa: E402

pytestmark = pytest.mark.slow

GROUP = "lightning.pytorch.callbacks_factory"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def callbacks_entry_point(tmp_path_factory, monkeypatch):
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        tomllib = pytest.importorskip("tomli")
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"][GROUP]
    installed = {ep.value for ep in entry_points(group=GROUP)}
    if not set(declared.values()) <= installed:
        site = tmp_path_factory.mktemp("site")
        info = site / "gradguard_entry_points-0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: gradguard-entry-points\nVersion: 0\n")
        (info / "entry_points.txt").write_text(f"[{GROUP}]\n" + "".join(f"{k} = {v}\n" for k, v in declared.items()))
        # appended: `gradguard run` puts the script's folder in place of sys.path[0]
        monkeypatch.setattr(sys, "path", sys.path + [str(site)])
        importlib.invalidate_caches()
    assert "gradguard.integrations.lightning:watch_callbacks" in {ep.value for ep in entry_points(group=GROUP)}
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", ".*does not have many workers.*")


def _batches(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(4, 5, generator=g, dtype=torch.float64), torch.randn(4, 2, generator=g, dtype=torch.float64))
            for _ in range(n)]


class Module(L.LightningModule):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(5, 6), torch.nn.Tanh(), torch.nn.Linear(6, 2)).double()

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)  # every window sees the initial weights


class Applied(L.Callback):
    """The gradient each optimizer step applies."""

    def __init__(self):
        self.grads = []

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self.grads.append([p.grad.detach().clone() for p in pl_module.net.parameters()])


def _run(batches, k, epochs=1, exact=False):
    """Fit under a watch; returns the findings, the gradient of each step, the module and the Trainer's line."""
    applied = Applied()
    callbacks = ([ExactAccumulation()] if exact else []) + [applied]  # read after ExactAccumulation rescaled
    module = Module()
    with gg.watch(mode="record") as w:
        line = inspect.currentframe().f_lineno + 1
        trainer = L.Trainer(max_epochs=epochs, accumulate_grad_batches=k, callbacks=callbacks, logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, accelerator="cpu", devices=1)  # one line: the finding points at it
        trainer.fit(module, torch.utils.data.DataLoader(batches, batch_size=None))
    return w.findings, applied.grads, module, line


def _reference(module, window):
    """float64 gradient of the mean loss over every item of ``window``, at the module's (unchanged) weights."""
    net = Module().net
    net.load_state_dict(module.net.state_dict())
    x = torch.cat([b[0] for b in window])
    y = torch.cat([b[1] for b in window])
    F.mse_loss(net(x), y).backward()
    return [p.grad for p in net.parameters()]


def _close(got, want, scale=1.0):
    for g, r in zip(got, want):
        torch.testing.assert_close(g, r * scale, rtol=1e-10, atol=1e-12)


def test_final_partial_window_is_reported_at_the_trainer_line():
    data = _batches(10)
    findings, grads, module, line = _run(data, 4)
    assert len(grads) == 3  # windows of 4, 4 and the epoch's last 2
    _close(grads[0], _reference(module, data[:4]))
    _close(grads[2], _reference(module, data[8:]), 2 / 4)  # the bug, measured: 2/4 of the mean
    assert [(f.code, f.step, f.path, f.line) for f in findings] == [("GG111", 3, __file__, line)]
    assert "accumulate_grad_batches=4" in findings[0].message and "2/4" in findings[0].message
    assert "ExactAccumulation" in findings[0].message


def test_an_epoch_shorter_than_k_is_reported_at_its_first_step():
    data = _batches(3)
    findings, grads, module, _ = _run(data, 8, epochs=2)
    assert len(grads) == 2  # one step per epoch, each on 3 micro-batches divided by 8
    _close(grads[0], _reference(module, data), 3 / 8)
    assert [(f.code, f.step) for f in findings] == [("GG111", 1)]


def test_exact_accumulation_is_exact_and_silent():
    data = _batches(10)
    findings, grads, module, _ = _run(data, 4, exact=True)
    _close(grads[2], _reference(module, data[8:]))
    assert findings == []


@pytest.mark.parametrize("n, k", [(8, 4), (10, 1), (6, 2)])
def test_full_windows_and_no_accumulation_are_silent(n, k):
    data = _batches(n)
    findings, grads, module, _ = _run(data, k)
    _close(grads[-1], _reference(module, data[n - k:]))
    assert findings == []


def test_manual_optimization_is_not_lightnings_division():
    # In manual optimization Lightning divides nothing: a step per batch, whatever accumulate_grad_batches says.
    class Manual(Module):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch, batch_idx):
            opt = self.optimizers()
            x, y = batch
            self.manual_backward(F.mse_loss(self.net(x), y))
            opt.step()
            opt.zero_grad()

    module = Manual()
    with gg.watch(mode="record") as w:
        trainer = L.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                            enable_model_summary=False, accelerator="cpu", devices=1)
        trainer.fit(module, torch.utils.data.DataLoader(_batches(5), batch_size=None))
    assert w.findings == []


def test_no_callback_without_a_watch():
    trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, accelerator="cpu", devices=1)
    assert not any(type(cb).__module__.startswith("gradguard") for cb in trainer.callbacks)


def test_gradguard_run_reports_the_trainer_line(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        "import lightning as L\n"
        "import torch\n"
        "import torch.nn.functional as F\n"
        "\n"
        "\n"
        "class M(L.LightningModule):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.layer = torch.nn.Linear(6, 2)\n"
        "\n"
        "    def training_step(self, batch, batch_idx):\n"
        "        x, y = batch\n"
        "        return F.mse_loss(self.layer(x), y)\n"
        "\n"
        "    def configure_optimizers(self):\n"
        "        return torch.optim.SGD(self.parameters(), lr=0.1)\n"
        "\n"
        "\n"
        "data = torch.utils.data.TensorDataset(torch.randn(40, 6), torch.randn(40, 2))\n"
        "trainer = L.Trainer(max_epochs=1, accumulate_grad_batches=4, logger=False, enable_checkpointing=False,\n"
        "                    enable_progress_bar=False, enable_model_summary=False, accelerator='cpu', devices=1)\n"
        "trainer.fit(M(), torch.utils.data.DataLoader(data, batch_size=4))\n"
    )
    report = tmp_path / "findings.json"
    assert main(["run", "--mode", "record", "--report", str(report), str(script)]) == 0
    findings = json.loads(report.read_text())
    assert [(f["code"], f["step"], f["line"]) for f in findings] == [("GG111", 3, 20)]
