"""Findings out of the watch: once per code and line, named, then recorded, warned or raised.

Naming lives here: the reporter learns the modules seen running (``see``) and
names a finding's parameters by them, or by the optimizer slot that holds them.
"""

from __future__ import annotations

import sys
import warnings
from typing import Callable, Dict, Iterable, List, Optional, Sequence

import torch

from .._errors import GradientBugError, GradientBugWarning
from ..findings import Finding
from ..findings import make_finding
from ._source import Site


class Reporter:
    """Collects the findings of one watch.

    ``report`` queues a finding (once per code and location, also across
    re-entries of one watch); ``flush``, called when the event that found it
    ends, records it, warns at the user's line, or raises the first one
    (``mode="raise"``) before the optimizer applies a bad update.
    """

    def __init__(self, mode: str, ignore: frozenset, findings: List[Finding], reported: set,
                 rewrite: Optional[Callable[[Finding], Finding]] = None,
                 optimizers: Callable[[], Iterable] = tuple):
        self.mode = mode
        self.ignore = ignore
        self.findings = findings
        self.reported = reported  # (code, path, line)
        self._queue: List[Finding] = []
        self._modules: Dict[int, torch.nn.Module] = {}  # the modules seen running
        self._extra: Dict[int, torch.nn.Module] = {}  # models only named (see name_also)
        self._name_cache: Optional[Dict[int, str]] = None  # id(parameter) -> its qualified name
        self._optimizers = optimizers  # the watched optimizers (objects with .opt and .name)
        self._rewrite = rewrite  # a framework integration's relocation and advice

    # ------------------------------------------------------------ names
    def see(self, module: torch.nn.Module) -> None:
        """A module ran: its parameters can now be named."""
        self._modules[id(module)] = module
        self._name_cache = None

    def name_also(self, modules: Sequence[torch.nn.Module]) -> None:
        """Models not seen running (their forward ran before the watch learned the models) whose parameters a
        finding names: named as the models seen running are; they count as seen for nothing else."""
        for m in modules:
            if id(m) not in self._modules and id(m) not in self._extra:
                self._extra[id(m)] = m
                self._name_cache = None

    def knows(self, module: torch.nn.Module) -> bool:
        return id(module) in self._modules

    def modules(self) -> List[torch.nn.Module]:
        return list(self._modules.values())

    def _names(self) -> Dict[int, str]:
        if self._name_cache is None:
            seen = list(self._modules.values())
            self._name_cache = model_names(seen + [m for k, m in self._extra.items() if k not in self._modules])
        return self._name_cache

    def _slot(self, p: torch.Tensor) -> Optional[str]:
        for ost in self._optimizers():
            for gi, group in enumerate(ost.opt.param_groups):
                for pi, q in enumerate(group["params"]):
                    if q is p:
                        return f"{ost.name}.param_groups[{gi}]['params'][{pi}]"
        return None

    def wants(self, code: str, site: Site) -> bool:
        """Whether a finding of ``code`` at ``site`` would still be reported."""
        return code not in self.ignore and (code, site[0], site[1]) not in self.reported

    def report(self, code: str, detail: str, site: Site, step: Optional[int], params: Sequence = (),
               advice: Optional[str] = None) -> None:
        """Queue a finding; ``params`` are tensors (or records with a ``.p`` tensor) for the names;
        ``advice`` replaces the rule's fix (a framework's own remedy)."""
        if not self.wants(code, site):
            return
        self.reported.add((code, site[0], site[1]))
        names = self.param_names(params)
        self._queue.append(make_finding(code, detail, path=site[0], line=site[1], step=step, params=names or None,
                                        advice=advice))

    def drop(self) -> None:
        """Forget what was queued (the user's own error comes first)."""
        self._queue = []

    def flush(self) -> None:
        """Emit queued findings: record, warn, or raise the first one."""
        queue, self._queue = self._queue, []
        if not queue:
            return
        if self._rewrite is not None:
            queue = [self._rewrite(f) for f in queue]
        self.findings.extend(queue)
        if self.mode == "warn":
            for f in queue:
                try:
                    warnings.warn_explicit(f.warning_text(), GradientBugWarning, f.path or "<unknown>", f.line or 0)
                except ValueError:
                    # Python's warnings ignore an OSError from a stderr they cannot write to, not the
                    # ValueError of one the program closed: the finding is recorded (``gradguard run``
                    # summarises it on the stderr it started with) and the program goes on as without us.
                    if not getattr(sys.stderr, "closed", False):
                        raise
        elif self.mode == "raise":
            raise GradientBugError(queue[0])

    def param_names(self, params: Sequence, limit: int = 10) -> List[str]:
        if not params:
            return []
        names = self._names()
        out = []
        for item in params[:limit]:
            p = getattr(item, "p", item)
            name = names.get(id(p))
            if name is None:
                name = self._slot(p) or f"<tensor {tuple(p.shape)}>"
            out.append(name)
        if len(params) > limit:
            out.append(f"... ({len(params) - limit} more)")
        return out


def model_names(modules: Sequence[torch.nn.Module]) -> Dict[int, str]:
    """id(parameter) -> its name, from the modules seen running.

    Top-level modules are those that are no other seen module's child. One
    model: its qualified names (encoder.layer.0.weight), as the user knows them.
    Several (a GAN, models kept in a ModuleDict): prefixed by the model's
    class, and by its class and number in the order they first ran (Linear#1,
    Linear#2) when two share a class. A single model that is one layer
    (nn.Linear) gets its class too: a bare "weight" names nothing.
    """
    children = set()
    for m in modules:
        for sub in m.modules():
            if sub is not m:
                children.add(id(sub))
    roots = [m for m in modules if id(m) not in children and next(m.parameters(), None) is not None]
    classes: Dict[str, int] = {}
    for root in roots:
        classes[type(root).__name__] = classes.get(type(root).__name__, 0) + 1
    seen: Dict[str, int] = {}
    names: Dict[int, str] = {}
    for root in roots:
        cls = type(root).__name__
        seen[cls] = seen.get(cls, 0) + 1
        label = f"{cls}#{seen[cls]}" if classes[cls] > 1 else cls
        prefix = len(roots) > 1 or not root._modules
        for name, p in root.named_parameters():
            names.setdefault(id(p), f"{label}.{name}" if prefix else name)
    return names
