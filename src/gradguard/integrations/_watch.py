"""The run-time watch inside a framework's loop, with findings that fit the framework.

Inside ``trainer.fit()`` or ``trainer.train()`` the framework makes the
backward passes and the optimizer steps, so the innermost frame of the user's
own code is the ``fit``/``train`` call: a finding would point there and
suggest a hand-written ``gradguard.Accumulator`` loop that the framework's
automatic optimization cannot use. :class:`FrameworkWatch` runs an ordinary
:class:`gradguard.watch` and rewrites each finding before it is recorded,
warned or raised: what pointed at the ``fit`` call points at the line that
made the loss (in ``training_step`` or ``compute_loss``), and the advice is the
framework's (a callback, a check) instead of a raw loop.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from typing import Dict, Optional, Tuple

import torch

from ..findings import make_finding
from ..watcher import describe_site as _at
from ..watcher import user_site, watch

Site = Tuple[Optional[str], Optional[int]]


class FrameworkWatch:
    """A :class:`gradguard.watch` whose findings are relocated and re-advised (see the module docstring)."""

    def __init__(self, mode: str, ignore, advice: Dict[str, str]) -> None:
        # validates mode and codes now, at construction
        self._watch = watch(mode=mode, ignore=ignore, rewrite=self._rewrite)
        self.advice = advice
        self._from: Site = (None, None)
        self._to: Site = (None, None)

    @property
    def findings(self):
        return self._watch.findings

    @property
    def active(self) -> bool:
        return self._watch.active

    def start(self, loss_site: Site, optimizers=(), windowed: bool = False) -> None:
        """Enter the watch; findings at the caller's user line move to ``loss_site``.

        ``optimizers``: those the framework built before the run. A plain loop
        introduces its optimizer to the watch with its first ``zero_grad``; a
        framework clears with ``model.zero_grad()`` and steps later, so without
        this a gradient cleared before the first step (a ``model.zero_grad()`` in
        an overridden ``training_step``) would belong to no optimizer yet and be
        reported as a step without gradient (GG110) instead of a discard (GG102).

        ``windowed``: the framework's loop runs every backward pass between two steps into the second (the HF
        Trainer's accumulation window), so a clearing that discards one is a bug at its first occurrence, not
        only once systematic (a 2-step run with ``model.zero_grad()`` in ``training_step`` would go unreported).
        """
        if self.active:
            self.stop()  # a previous run that crashed without telling us
        self._from = user_site(2)  # the user's trainer.fit(...) / trainer.train() line
        self._to = loss_site if loss_site[0] is not None else self._from
        self._watch.__enter__()
        # The session's tracker learns an optimizer's parameters as at its first zero_grad or step.
        engine = getattr(self._watch, "_engine", None)
        if windowed and "GG102" in getattr(engine, "memory", {}):
            engine.memory["GG102"].windowed = True
        learn = getattr(getattr(engine, "tracker", None), "opt_state", None)
        if learn is not None:
            for opt in optimizers:
                while isinstance(getattr(opt, "optimizer", None), torch.optim.Optimizer):
                    opt = opt.optimizer  # Accelerate's wrapper: the hooks see the torch optimizer it steps
                if isinstance(opt, torch.optim.Optimizer):
                    engine.guard(learn, opt)

    def stop(self, exc: Optional[BaseException] = None) -> None:
        """Leave the watch (end-of-run rules run when ``exc`` is None; may raise in ``"raise"`` mode)."""
        if not self.active:
            return
        if exc is None:
            self._watch.__exit__(None, None, None)
        else:
            self._watch.__exit__(type(exc), exc, exc.__traceback__)

    def report(self, code: str, detail: str, step: Optional[int] = None) -> None:
        """A finding the framework's callback made itself (the watch cannot see it), at the loss line."""
        if not self.active:
            return
        engine = getattr(self._watch, "_engine", None)
        if engine is not None:
            engine.report(code, detail, self._to, step)
            engine.reporter.flush()

    def _rewrite(self, f):
        path, line, detail = f.path, f.line, f.detail or ""
        if self._to != self._from and self._from[0] is not None and (path, line) in (self._from, (None, None)):
            path, line = self._to
            detail = detail.replace(_at(self._from, self._from), _at(self._to, self._to))
        return make_finding(f.code, detail, path=path, line=line, step=f.step, params=f.params,
                            advice=self.advice.get(f.code) or f.advice)


def loss_line(fn) -> Site:
    """``(file, line)`` where ``fn`` (a ``training_step``, a ``compute_loss``) makes the loss it returns.

    The last ``return`` of the function; when it returns a name (``return loss``,
    ``return {"loss": loss}``), the last assignment to that name before it.
    ``(None, None)`` when the source cannot be read.

    >>> def training_step(self, batch, i):
    ...     x, y = batch
    ...     loss = (x - y).pow(2).mean()
    ...     return loss
    >>> loss_line(training_step)[1] - training_step.__code__.co_firstlineno
    2
    """
    fn = inspect.unwrap(getattr(fn, "__func__", fn))
    try:
        lines, first = inspect.getsourcelines(fn)
        tree = ast.parse(textwrap.dedent("".join(lines)))
        path = inspect.getsourcefile(fn)
    except (OSError, TypeError, SyntaxError):
        return (None, None)
    func = tree.body[0]
    returns = [n for n in ast.walk(func) if isinstance(n, ast.Return) and n.value is not None]
    if not returns:
        return (None, None)
    ret = max(returns, key=lambda n: n.lineno)
    value = ret.value
    if isinstance(value, ast.IfExp):
        # `return (loss, outputs) if return_outputs else loss`: the branch that is the loss alone.
        value = value.orelse if isinstance(value.orelse, ast.Name) else value.body
    if isinstance(value, ast.Dict):
        value = next((v for k, v in zip(value.keys, value.values) if isinstance(k, ast.Constant) and k.value == "loss"), value)
    elif isinstance(value, ast.Tuple) and value.elts:
        value = value.elts[0]
    while isinstance(value, (ast.Attribute, ast.Subscript)):
        value = value.value  # `return outputs.loss` / `outputs["loss"]`: where `outputs` was made
    target = ret.lineno
    if isinstance(value, ast.Name):
        assigned = [
            n.lineno for n in ast.walk(func)
            if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and n.lineno < ret.lineno
            and any(isinstance(t, ast.Name) and t.id == value.id
                    for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) for t in ast.walk(t))
        ]
        if assigned:
            target = max(assigned)
    return (path, first + target - 1)
