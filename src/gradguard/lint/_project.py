"""What the files linted together say about each other's classes.

A rule sometimes needs a fact that a base class states in another file of the same package:
an HF ``Trainer`` subclass whose base (``class GRPOTrainer(_BaseTrainer)`` in one module,
``class MiniLLMTrainer(GRPOTrainer)`` in another) decides how the Trainer scales the loss for
gradient accumulation. The index is read from the text in one pass per file (class headers and
the few attribute assignments that matter), so it costs time linear in the size of the tree.
"""

from __future__ import annotations

import re
from typing import Dict, Iterable, Set, Tuple

_CLASS = re.compile(r"^([ \t]*)class[ \t]+(\w+)[ \t]*(?:\(([^)]*)\))?[ \t]*:", re.M)
# The Trainer divides the loss by the accumulation steps itself (`model_accepts_loss_kwargs = False`),
# or the class says whether its loss is already scaled (`loss_is_scaled_for_ga = ...`, transformers 5).
_DECIDES_SCALING = re.compile(r"\bmodel_accepts_loss_kwargs[ \t]*=[ \t]*False\b|\bloss_is_scaled_for_ga[ \t]*(?::[^=\n]*)?=[ \t]*(True|False)\b")


class Project:
    """Class name -> base names, and the classes that decide the Trainer's loss scaling.

    >>> p = Project([("a.py", "class Base(Trainer):\\n    def __init__(self):\\n        self.model_accepts_loss_kwargs = False\\n"),
    ...              ("b.py", "class Mine(Base):\\n    pass\\n")])
    >>> p.decides_loss_scaling("Mine"), p.decides_loss_scaling("Other")
    (True, False)
    """

    def __init__(self, files: Iterable[Tuple[str, str]] = ()):
        self.bases: Dict[str, Set[str]] = {}
        self.scaling: Set[str] = set()
        for _, text in files:
            self.add(text)

    def add(self, text: str) -> None:
        if "class" not in text:
            return
        headers = list(_CLASS.finditer(text))
        for m in headers:
            bases = {b.strip().split(".")[-1].split("[")[0] for b in (m.group(3) or "").split(",") if b.strip() and "=" not in b}
            self.bases.setdefault(m.group(2), set()).update(b for b in bases if b.isidentifier())
        if not headers:
            return
        starts = [m.start() for m in headers]
        for m in _DECIDES_SCALING.finditer(text):
            # the class around the assignment: the last header before it at a smaller indentation
            line_start = text.rfind("\n", 0, m.start()) + 1
            indent = len(text[line_start:m.start()]) - len(text[line_start:m.start()].lstrip())
            for h in reversed([h for h, s in zip(headers, starts) if s < m.start()]):
                if len(h.group(1)) < indent:
                    self.scaling.add(h.group(2))
                    break

    def ancestors(self, name: str) -> Set[str]:
        """``name`` and every class it derives from, as far as the index knows them."""
        seen, pending = {name}, [name]
        while pending:
            for base in self.bases.get(pending.pop(), ()):
                if base not in seen:
                    seen.add(base)
                    pending.append(base)
        return seen

    def decides_loss_scaling(self, name: str) -> bool:
        return not self.scaling.isdisjoint(self.ancestors(name))
