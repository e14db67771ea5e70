"""GG102 in the linter for a clearing at the start of each epoch while the accumulation windows run on across
epochs (a window counter set before the epoch loop): the epoch's last, unfinished window is cleared before a
step uses it.

Each program is run in float64 against an independent reference: plain PyTorch stepping every K
micro-batches of the whole run, each step on the mean of its window's losses. The correct twin (the clearing
before the epoch loop) lands on the reference; the buggy program does not (negative control). The linter
flags every buggy form and none of the correct ones.
"""

from __future__ import annotations

import pytest
import torch

from _findings import codes

FUNCTION = """\
import torch


def train(model, opt, loader, epochs, k):
    global_step = 0
    # FIX: opt.zero_grad()
    for epoch in range(epochs):
        opt.zero_grad()  # BUG
        for x, y in loader:
            loss = ((model(x) - y) ** 2).mean() / k
            loss.backward()
            global_step += 1
            if global_step % k == 0:
                opt.step()
                opt.zero_grad()
"""

METHOD = """\
import torch


class Runner:
    def __init__(self, model, opt, k):
        self.model, self.opt, self.k = model, opt, k

    def apply(self):
        self.opt.step()
        self.opt.zero_grad()

    def fit(self, loader, epochs):
        n = len(loader)
        last = -1
        # FIX: self.opt.zero_grad()
        for epoch in range(epochs):
            self.opt.zero_grad()  # BUG
            for i, (x, y) in enumerate(loader):
                seen = i + n * epoch
                ((self.model(x) - y) ** 2).mean().div(self.k).backward()
                if seen - last >= self.k:
                    self.apply()
                    last = seen


def train(model, opt, loader, epochs, k):
    Runner(model, opt, k).fit(loader, epochs)
"""

PROGRAMS = {"function": FUNCTION, "method": METHOD}


def twin(source: str) -> str:
    out = []
    for line in source.split("\n"):
        if line.rstrip().endswith("# BUG"):
            continue
        out.append(line.replace("# FIX: ", ""))
    return "\n".join(out)


def _gg102(source):
    return [c for c in codes(source) if c == "GG102"]


def _setup():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 6), torch.nn.Tanh(), torch.nn.Linear(6, 1)).double()
    g = torch.Generator().manual_seed(1)
    loader = [(torch.randn(4, 5, generator=g, dtype=torch.float64), torch.randn(4, 1, generator=g, dtype=torch.float64))
              for _ in range(6)]
    return model, loader


def _params(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _run(source, k):
    namespace = {}
    exec(compile(source, "<train>", "exec"), namespace)
    model, loader = _setup()
    namespace["train"](model, torch.optim.SGD(model.parameters(), lr=0.1), loader, 2, k)
    return _params(model)


def _reference(k):
    """Windows of k micro-batches over the whole run (two epochs of six), each step on its window's mean."""
    model, loader = _setup()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    stream = loader + loader
    for start in range(0, len(stream) - len(stream) % k, k):
        window = stream[start : start + k]
        loss = sum(((model(x) - y) ** 2).mean() for x, y in window) / k
        opt.zero_grad()
        loss.backward()
        opt.step()
    return _params(model)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_the_clearing_is_flagged_and_drops_gradient_its_twin_is_silent_and_exact(name):
    source = PROGRAMS[name]
    assert _gg102(source) == ["GG102"]
    assert _gg102(twin(source)) == []
    reference = _reference(4)
    torch.testing.assert_close(_run(twin(source), 4), reference, rtol=0, atol=1e-12)
    assert not torch.allclose(_run(source, 4), reference, atol=1e-4)  # negative control


def _renamed(source):
    for old, new in (("global_step", "count_"), ("last", "prev_update"), ("seen", "idx"), ("Runner", "Engine"),
                     ("apply", "update_weights"), ("opt", "optimizer_"), ("epoch", "ep")):
        source = source.replace(old, new)
    return source


def _unrelated_code(source):
    return source.replace("import torch\n", "import torch\n\nVERSION = 2\n\n\ndef unrelated():\n    return VERSION\n", 1)


@pytest.mark.parametrize("rewrite", [_renamed, _unrelated_code], ids=lambda f: f.__name__)
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_rewrites_that_keep_the_computation_keep_the_verdict(name, rewrite):
    source = rewrite(PROGRAMS[name])
    assert _gg102(source) == ["GG102"]
    assert _gg102(twin(source)) == []


def test_windows_that_restart_every_epoch_are_not_this_finding():
    """The window test reads the inner loop's own variable: windows restart each epoch (a tail left unstepped is
    another question), nothing runs on across the clearing."""
    source = FUNCTION.replace("            if global_step % k == 0:", "            if (i + 1) % k == 0:").replace(
        "        for x, y in loader:", "        for i, (x, y) in enumerate(loader):")
    assert _gg102(source) == []


def test_a_window_flushed_after_the_inner_loop_is_not_discarded():
    source = FUNCTION.replace("                opt.zero_grad()\n", "                opt.zero_grad()\n        opt.step()\n", 1)
    assert _gg102(source) == []


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_the_fix_clears_once_before_the_epochs_and_matches_the_reference(name):
    from gradguard.lint.autofix import fix_source

    source = PROGRAMS[name]
    result = fix_source(source)
    # once the clearing is out of the epoch loop the windows run on across epochs, and the run's last window
    # (GG103, at the epoch loop) may be stepped once after it: with 12 micro-batches in windows of 4 that
    # changes nothing, and the program still lands on the reference
    assert [f.code for f in result.fixed if f.code != "GG103"] == ["GG102"]
    assert _gg102(result.text) == []
    torch.testing.assert_close(_run(result.text, 4), _reference(4), rtol=0, atol=1e-12)


def test_without_a_clearing_after_the_step_the_fixes_still_end_at_the_reference():
    """Nothing clears between windows either (GG101 too): the clearing moves out only once GG101's fix has put
    one after the step, and the program then computes the reference."""
    from gradguard.lint.autofix import fix_source

    source = FUNCTION.replace("                opt.step()\n                opt.zero_grad()\n", "                opt.step()\n")
    assert {"GG101", "GG102"} <= set(codes(source))
    result = fix_source(source)
    assert not {"GG101", "GG102"} & set(codes(result.text))
    torch.testing.assert_close(_run(result.text, 4), _reference(4), rtol=0, atol=1e-12)
