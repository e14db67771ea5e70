"""The execution oracle's truth: run a generated program and judge it from the numbers.

The harness installs two global PyTorch hooks (public API, removed afterwards):

* a module forward hook records every forward pass of the model: which rows of the data set
  it saw (matched against the program's data) and, in closed form, the *summed* gradient of
  the per-item losses ``||W x + b - y||^2`` of that micro-batch at the parameters of that
  moment, ``G_b`` (float64, independent of autograd);
* an optimizer step pre-hook reads the gradient each step is about to apply, ``g_s``.

Each ``g_s`` is decomposed as ``sum_b c_sb G_b`` over the micro-batches seen so far (least
squares; the run has fewer micro-batches than the model has parameters, and the residual is
checked). The reference for a step is the mean gradient of the items of its window — the
micro-batches forwarded since the previous step — so the ideal coefficient is ``1 / n_s`` for
every micro-batch of the window (``n_s`` its item count) and 0 for every other. The deviations,
and the spec's rule codes they are (``/work/shared/SPEC.md``, ``docs/rules.md``):

=========  =====================================================================================
GG101      a step applies a micro-batch an earlier step already applied (stale carry-over)
GG102      a micro-batch of a window gets weight 0 although a step follows it (discarded);
           a step whose whole window was discarded may also be named GG110 (step without
           gradient): accepted, not required
GG103      micro-batches after the last step (never applied: the dropped partial window); in a
           loop that discards its windows (GG102) the trailing passes may be named either way
GG104      the applied micro-batches of a window weigh the same, and their total weight is
           above the window's items (not scaled down)
GG105      the applied micro-batches of a window have different per-item weights
GG111      total weight below 1 on a window with fewer micro-batches than the largest one
GG113      total weight below 1 on a full window
GG201      a forward pass's autograd graph is still alive at a later step (a logged total
           holds it): found by a sentinel in the graph node's ``metadata``
=========  =====================================================================================

Where one numeric defect can be named by two codes, the second is *accepted*: a finding is
correct if it names a defect in ``required | accepted``. GG104 is required only as the plain
K-times of an unscaled window (the weight equals the number of passes applied), GG111/GG113 only
on equally weighted windows; any other scale deviation (a loss divided by the running micro-step
counter is both unequal and too large) is accepted, and so is every scale code on a window that
also discarded passes.
"""

from __future__ import annotations

import contextlib
import io
import warnings
import weakref
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set

import torch

TOL = 1e-6
#: the codes the oracle can decide
CODES = ("GG101", "GG102", "GG103", "GG104", "GG105", "GG111", "GG113", "GG201")


@dataclass
class Truth:
    required: Set[str] = field(default_factory=set)
    accepted: Set[str] = field(default_factory=set)
    steps: int = 0
    micro: int = 0
    coefficients: List[List[float]] = field(default_factory=list)  # per step, scaled by the window's items
    error: Optional[str] = None
    #: the model's parameters at the end of the run (weight then bias, flattened): what it trained to
    final: Optional[torch.Tensor] = None

    @property
    def allowed(self) -> Set[str]:
        return self.required | self.accepted


class _Sentinel:
    pass


class _Recorder:
    def __init__(self, x: torch.Tensor, y: torch.Tensor):
        self.rows = {tuple(r.tolist()): n for n, r in enumerate(x)}
        self.y = y
        self.micro: List[dict] = []  # per forward: items, G_b, sentinel weakref
        self.steps: List[dict] = []  # per step: gradient, index of first micro-batch after the step
        self.graph_kept = False
        self.module = None

    def forward_hook(self, module, args, output):
        if not isinstance(module, torch.nn.Linear) or not torch.is_grad_enabled():
            return None
        x = args[0].detach()
        items = [self.rows[tuple(r.tolist())] for r in x]
        y = self.y[items]
        with torch.no_grad():
            r = 2 * (x @ module.weight.T + module.bias - y)  # d/d(out) of ||out - y||^2, per item
            g = torch.cat([(r.T @ x).reshape(-1), r.sum(0)])
        sentinel = _Sentinel()
        if output.grad_fn is not None:
            output.grad_fn.metadata["oracle"] = sentinel
        self.module = module
        self.micro.append({"items": items, "G": g, "alive": weakref.ref(sentinel)})
        return None

    def step_hook(self, optimizer, args, kwargs):
        m = self.module
        if m is None:
            return None
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in (m.weight, m.bias)]
        g = torch.cat([grads[0].detach().reshape(-1), grads[1].detach().reshape(-1)]).clone()
        self.steps.append({"g": g, "seen": len(self.micro)})
        # a graph of any but the latest forward still alive: something holds it (a logged total)
        if any(mb["alive"]() is not None for mb in self.micro[:-1]):
            self.graph_kept = True
        return None


@contextlib.contextmanager
def importable(modules: Optional[Dict[str, str]], folder: Optional[str] = None):
    """``modules`` (file name -> text) importable by name while the block runs: written to ``folder``
    (a fresh temporary one if not given), the folder first on ``sys.path``, and any module of the same
    name imported before (another program's) forgotten before and after."""
    import os
    import shutil
    import sys
    import tempfile

    if not modules:
        yield
        return
    own = folder is None
    folder = tempfile.mkdtemp(prefix="gg_oracle_pkg_") if own else folder
    names = [os.path.splitext(f)[0] for f in modules]
    for f, text in modules.items():
        with open(os.path.join(folder, f), "w") as fh:
            fh.write(text)
    for name in names:
        sys.modules.pop(name, None)
    sys.path.insert(0, folder)
    try:
        yield
    finally:
        sys.path.remove(folder)
        for name in names:
            sys.modules.pop(name, None)
        if own:
            shutil.rmtree(folder, ignore_errors=True)


def run(source: str, x: torch.Tensor, y: torch.Tensor, filename: str = "<oracle>",
        modules: Optional[Dict[str, str]] = None) -> Truth:
    """Run ``source`` (a generated program training on rows of ``x``/``y``) and judge it.
    ``modules``: the other files of a multi-file program (``generate.modules``), importable by name."""
    rec = _Recorder(x, y)
    from torch.nn.modules.module import register_module_forward_hook
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    # the model's initial weights come from the global generator: the same for every run of a
    # program, so that two versions of it (a fix) can be compared by what they train to
    torch.manual_seed(0)
    h1 = register_module_forward_hook(rec.forward_hook)
    h2 = register_optimizer_step_pre_hook(rec.step_hook)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), importable(modules):
            warnings.simplefilter("ignore")
            exec(compile(source, filename, "exec"), {"__name__": "__main__", "__file__": filename})
    except Exception as e:  # noqa: BLE001 - a generated program that crashes is reported, not judged
        return Truth(error=f"{type(e).__name__}: {e}")
    finally:
        h1.remove()
        h2.remove()
    t = judge(rec)
    if rec.module is not None:
        t.final = torch.cat([rec.module.weight.detach().reshape(-1), rec.module.bias.detach().reshape(-1)]).clone()
    return t


def judge(rec: _Recorder) -> Truth:
    t = Truth(steps=len(rec.steps), micro=len(rec.micro))
    if rec.graph_kept:
        t.required.add("GG201")
    sizes = [len(mb["items"]) for mb in rec.micro]
    applied: Dict[int, int] = {}  # micro-batch -> first step applying it
    windows = []
    prev = 0
    for s in rec.steps:
        windows.append(list(range(prev, s["seen"])))
        prev = s["seen"]
    largest = max((len(w) for w in windows), default=0)
    for si, (s, window) in enumerate(zip(rec.steps, windows)):
        seen = s["seen"]
        if seen == 0:
            continue
        a = torch.stack([mb["G"] for mb in rec.micro[:seen]], dim=1)
        sol = torch.linalg.lstsq(a, s["g"].unsqueeze(1), driver="gelsd").solution.squeeze(1)
        resid = (a @ sol - s["g"]).norm() / max(s["g"].norm().item(), 1e-30)
        if s["g"].norm() > 0 and resid > 1e-6:
            t.error = f"step {si}: the applied gradient is no combination of the micro-batch gradients (residual {resid:.2e})"
            return t
        c = [v if abs(v) > TOL * 1e-3 else 0.0 for v in sol.tolist()]
        n_items = sum(sizes[b] for b in window)
        t.coefficients.append([round(v * n_items, 9) for v in c])
        for b in range(seen):
            if b in window or abs(c[b] * n_items) < TOL:
                continue
            if b in applied:
                t.required.add("GG101")  # applied again
            else:
                t.accepted.update({"GG101", "GG114"})  # carried over unapplied from an earlier window
        for b in window:
            if abs(c[b] * n_items) >= TOL and b not in applied:
                applied[b] = si
        nonzero = [b for b in window if abs(c[b] * n_items) >= TOL]
        discarded = len(nonzero) < len(window)
        if discarded:
            t.required.add("GG102")
            if not nonzero:
                t.accepted.add("GG110")
        if not nonzero:
            continue
        ratios = [c[b] * n_items for b in nonzero]  # per-item weight / the reference 1/n_s
        unequal = max(ratios) - min(ratios) > TOL * max(abs(v) for v in ratios)
        if unequal:
            t.required.add("GG105")
        weight = sum(c[b] * sizes[b] for b in nonzero) * n_items / sum(sizes[b] for b in nonzero)
        if abs(weight - 1) <= TOL:
            continue
        if weight > 1:
            # required only as the plain K-times of unscaled mean losses (K = the passes applied)
            code, must = "GG104", abs(weight - len(nonzero)) < TOL * len(nonzero) and len(nonzero) > 1
        else:
            code, must = ("GG111" if len(window) < largest else "GG113"), not unequal
        if discarded or not must:
            t.accepted.add(code)
            if not unequal and not discarded:
                t.accepted.add("GG105")  # equal weights of the wrong size but no K-times: either name
        else:
            t.required.add(code)
    if sizes and (not rec.steps or rec.steps[-1]["seen"] < len(sizes)):
        # micro-batches after the last step: never applied. In a loop that discards its windows
        # anyway (GG102), the trailing passes are discarded the same way: either name is right.
        (t.accepted if "GG102" in t.required else t.required).add("GG103")
        t.accepted.add("GG102")
    t.accepted -= t.required
    return t
