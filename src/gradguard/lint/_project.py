"""What the files linted together say about each other's classes.

A rule sometimes needs a fact that a base class states in another file of the same package:
an HF ``Trainer`` subclass whose base (``class GRPOTrainer(_BaseTrainer)`` in one module,
``class MiniLLMTrainer(GRPOTrainer)`` in another) decides how the Trainer scales the loss for
gradient accumulation. The index is read from the text in one pass per file (class headers and
the few attribute assignments that matter), so it costs time linear in the size of the tree.
"""

from __future__ import annotations

import re
from typing import Dict, Iterable, Optional, Set, Tuple

_CLASS = re.compile(r"^([ \t]*)class[ \t]+(\w+)[ \t]*(?:\(([^)]*)\))?[ \t]*:", re.M)
# The Trainer divides the loss by the accumulation steps itself (`model_accepts_loss_kwargs = False`),
# or the class says whether its loss is already scaled (`loss_is_scaled_for_ga = ...`, transformers 5).
_DECIDES_SCALING = re.compile(r"\bmodel_accepts_loss_kwargs[ \t]*=[ \t]*False\b|\bloss_is_scaled_for_ga[ \t]*(?::[^=\n]*)?=[ \t]*(True|False)\b")


class Project:
    """Class name -> base names, and the classes that decide the Trainer's loss scaling.

    A name is looked up in the file that asks first (its own class of that name, not another
    file's class of the same name), then in every file linted with it.

    >>> p = Project([("a.py", "class Base(Trainer):\\n    def __init__(self):\\n        self.model_accepts_loss_kwargs = False\\n"),
    ...              ("b.py", "class Mine(Base):\\n    pass\\n"),
    ...              ("c.py", "class Mine(Trainer):\\n    # self.model_accepts_loss_kwargs = False\\n    pass\\n")])
    >>> p.decides_loss_scaling("Mine", "b.py"), p.decides_loss_scaling("Mine", "c.py"), p.decides_loss_scaling("Other")
    (True, False, False)
    """

    def __init__(self, files: Iterable[Tuple[str, str]] = ()):
        #: (file, class) -> the names of its bases
        self.bases: Dict[Tuple[str, str], Set[str]] = {}
        #: class name -> the files that define a class of that name
        self.defined: Dict[str, Set[str]] = {}
        #: the (file, class) pairs that decide the Trainer's loss scaling
        self.scaling: Set[Tuple[str, str]] = set()
        for path, text in files:
            self.add(text, path)

    def add(self, text: str, path: str = "<string>") -> None:
        if "class" not in text:
            return
        headers = list(_CLASS.finditer(text))
        for m in headers:
            bases = {b.strip().split(".")[-1].split("[")[0] for b in (m.group(3) or "").split(",") if b.strip() and "=" not in b}
            self.bases.setdefault((path, m.group(2)), set()).update(b for b in bases if b.isidentifier())
            self.defined.setdefault(m.group(2), set()).add(path)
        if not headers:
            return
        starts = [m.start() for m in headers]
        for m in _DECIDES_SCALING.finditer(text):
            line_start = text.rfind("\n", 0, m.start()) + 1
            before = text[line_start:m.start()]
            if "#" in before:
                continue  # a comment (a fix not applied) decides nothing
            # the class around the assignment: the last header before it at a smaller indentation
            indent = len(before) - len(before.lstrip())
            for h in reversed([h for h, s in zip(headers, starts) if s < m.start()]):
                if len(h.group(1)) < indent:
                    self.scaling.add((path, h.group(2)))
                    break

    def _classes(self, name: str, path: Optional[str]) -> Set[Tuple[str, str]]:
        """The classes ``name`` may mean from ``path``: its own if it defines one, else any file's."""
        files = self.defined.get(name, set())
        if path in files:
            return {(path, name)}
        return {(f, name) for f in files}

    def ancestors(self, name: str, path: Optional[str] = None) -> Set[Tuple[str, str]]:
        """The classes ``name`` may mean (seen from ``path``) and every class they derive from,
        as far as the index knows them, as ``(file, class)``."""
        seen = self._classes(name, path)
        pending = list(seen)
        while pending:
            file, cls = pending.pop()
            for base in self.bases.get((file, cls), ()):
                for found in self._classes(base, file):
                    if found not in seen:
                        seen.add(found)
                        pending.append(found)
        return seen

    def decides_loss_scaling(self, name: str, path: Optional[str] = None) -> bool:
        return not self.scaling.isdisjoint(self.ancestors(name, path))
