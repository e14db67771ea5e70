"""GG115 follows a clip made by a method of the object the loop calls it on, where the file builds that
object from one of its classes (``model = Net()`` ... ``model.limit(1.0)``, ``self.model = Net()``
... ``self.model.limit(1.0)``), as it follows a function or a ``self.`` method of the file.

The oracle runs each program in float64: one step of SGD (lr 1) on a window of K micro-batches must
apply the full-batch gradient of the window clipped once (plain PyTorch); the clip inside the window
clips partial sums and does not. A method that does not clip, called on every micro-batch, draws
nothing (negative control), and renaming the method and the class keeps every verdict.
"""

from __future__ import annotations

import pytest
import torch

import gradguard as gg

NET = """
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(x)

    def limit(self, max_norm):
        torch.nn.utils.clip_grad_norm_(self.parameters(), max_norm)

    def size(self):
        return sum(p.numel() for p in self.parameters())
"""

FUNCTION = NET + """

def train(loader, K, model):
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    for i, (x, y) in enumerate(loader):
        loss = torch.nn.functional.mse_loss(model(x), y) / K
        loss.backward()
        __CALL__
        if (i + 1) % K == 0:
            __WINDOW__
            opt.step()
            opt.zero_grad()
"""

METHOD = NET + """

class Trainer:
    def __init__(self, model):
        self.model = model
        self.opt = torch.optim.SGD(self.model.parameters(), lr=1.0)

    def fit(self, loader, K):
        for i, (x, y) in enumerate(loader):
            loss = torch.nn.functional.mse_loss(self.model(x), y) / K
            loss.backward()
            __CALL__
            if (i + 1) % K == 0:
                __WINDOW__
                self.opt.step()
                self.opt.zero_grad()


def train(loader, K, model):
    Trainer(model).fit(loader, K)
"""

BUILT = {FUNCTION: ("model", "model = Net()"), METHOD: ("self.model", "self.model = Net()")}


def _program(template: str, call: str, window: str) -> str:
    obj, build = BUILT[template]
    source = template.replace("__CALL__", call.replace("OBJ", obj) if call else "pass")
    source = source.replace("__WINDOW__", window.replace("OBJ", obj) if window else "pass")
    # the file builds the object from its class (what lets the linter know the method)
    if template is FUNCTION:
        return source.replace("def train(loader, K, model):\n", "def train(loader, K, model=None):\n    model = Net()\n")
    return source.replace("        self.model = model\n", "        self.model = Net()\n").replace(
        "def train(loader, K, model):\n    Trainer(model).fit(loader, K)", "def train(loader, K):\n    t = Trainer(None)\n    t.fit(loader, K)\n    return t.model")


def _update(source: str, loader, k: int) -> torch.Tensor:
    torch.manual_seed(0)
    scope: dict = {}
    exec(compile(source, "<program>", "exec"), scope)
    torch.set_default_dtype(torch.float64)
    try:
        torch.manual_seed(0)
        model = scope["train"](loader, k) if "def train(loader, K):" in source else None
        if model is None:  # the function form builds its own model: read it back through a wrapper
            built = {}
            real = scope["Net"]

            class Recording(real):
                def __init__(self):
                    super().__init__()
                    built["m"] = self

            scope["Net"] = Recording
            torch.manual_seed(0)
            scope["train"](loader, k)
            model = built["m"]
    finally:
        torch.set_default_dtype(torch.float32)
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def _reference(loader, k: int, max_norm: float) -> torch.Tensor:
    """Plain PyTorch: the window's full-batch gradient, clipped once, applied by SGD with lr 1."""
    torch.set_default_dtype(torch.float64)
    try:
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 2)
    finally:
        torch.set_default_dtype(torch.float32)
    x, y = torch.cat([b[0] for b in loader[:k]]), torch.cat([b[1] for b in loader[:k]])
    torch.nn.functional.mse_loss(model(x), y).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    with torch.no_grad():
        for p in model.parameters():
            p -= p.grad
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def _loader(k: int):
    g = torch.Generator().manual_seed(3)
    return [(10 * torch.randn(3, 4, generator=g, dtype=torch.float64), torch.randn(3, 2, generator=g, dtype=torch.float64))
            for _ in range(k)]


def _gg115(source: str) -> list:
    return [f for f in gg.lint_source(source) if f.code == "GG115"]


@pytest.mark.parametrize("template", [FUNCTION, METHOD], ids=["function", "method"])
def test_a_clip_method_of_the_model_inside_the_window(template):
    k, loader = 4, _loader(4)
    reference = _reference(loader, k, 0.5)
    bad = _program(template, "OBJ.limit(0.5)", "")
    good = _program(template, "", "OBJ.limit(0.5)")
    assert torch.allclose(_update(good, loader, k), reference, rtol=0, atol=1e-12)
    assert not torch.allclose(_update(bad, loader, k), reference, rtol=0, atol=1e-6)
    assert _gg115(bad) and not _gg115(good)
    # negative control: a method of the same object that does not clip, on every micro-batch
    quiet = _program(template, "OBJ.size()", "OBJ.limit(0.5)")
    assert torch.allclose(_update(quiet, loader, k), reference, rtol=0, atol=1e-12)
    assert not _gg115(quiet)


@pytest.mark.parametrize("template", [FUNCTION, METHOD], ids=["function", "method"])
def test_renaming_the_method_and_the_class_keeps_the_verdicts(template):
    for call, window, found in (("OBJ.limit(0.5)", "", True), ("", "OBJ.limit(0.5)", False), ("OBJ.size()", "", False)):
        source = _program(template, call, window)
        renamed = source.replace("limit", "bound_norm").replace("Net", "Body").replace("size", "count_weights")
        assert renamed != source
        assert bool(_gg115(source)) == bool(_gg115(renamed)) == found


def test_an_object_bound_to_two_classes_is_not_followed():
    # `model` is a Net in one place and something else in another: which method runs is not known
    source = _program(FUNCTION, "OBJ.limit(0.5)", "") + "\n\nmodel = object()\n"
    assert not _gg115(source)
