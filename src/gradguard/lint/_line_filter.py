"""The builder's text pre-filter: which lines of a file may hold a gradient-buffer event.

Before any walk, cheap text searches (``str.find`` for a few words, one regular expression
for call sites) mark the lines that can hold an event, the lines calling a helper or closure
that holds one (to a fixed point), the lines that can reach a backward pass and the lines that
sum a loss; :mod:`._builder` then walks only the statements on those lines.

:class:`_LineMarks` holds the builder's steps that make these marks. It is a base class of
``_builder._Builder`` and works on the builder's state (``self.m``, the module being built).
"""

from __future__ import annotations

import ast
import re
import sys
from typing import TYPE_CHECKING, Callable, Dict, List

from ._ast import NO_GRAD_CONTEXTS, find_all, lines_of, no_grad_with, overlaps, subtree, terminal, walk_lines
from ._events import OPTIMIZER_CLASSES, conditional_step
from ._project import matches_at

if TYPE_CHECKING:
    from ._model import Module


# Words without which a line holds no gradient-buffer event (searched with str.find,
# which is much faster than one regular expression with many alternatives).
# (A manual update `p.data.add_(p.grad)` or `p.grad.zero_()` is found by ".grad".)
_KEYWORDS = (
    "backward", ".step", "zero_grad", ".grad", "create_graph", "optim", "accumulate",
    "SGD", "Adam", "RMSprop", "Adagrad", "Adadelta", "Lion", "LAMB", "Lamb", "Muon", "_foreach_zero_",
    "clear_grad", "reset_grad", "free_grad", "grad_none", "grads_none", "grads_to_none", "grad_to_none",
    "num_items_in_batch", "Accumulator", "accumulate_batch", "acc.", ".zero()", ".reset()",
)


# A name called: the run of word characters before "(" from its first letter or "_" (as a
# search for `[A-Za-z_]\w*\s*\(` finds it), matched once per run rather than from each of its characters.
# The possessive quantifiers (Python 3.11+) only spare the backtracking: the classes they repeat are
# disjoint from what follows each, so Python 3.10's plain ones match exactly the same.
_CALL_SITE = re.compile(r"\b[^\W_A-Za-z]*+([A-Za-z_]\w*+)\s*+\(" if sys.version_info >= (3, 11)
                        else r"\b[^\W_A-Za-z]*([A-Za-z_]\w*)\s*\(")
_PARTIAL_SITE = re.compile(r"\bpartial\s*\(\s*(?:self\s*\.\s*)?([A-Za-z_]\w*)")
#: ``opt.step(closure)`` / ``opt.step(self.closure)``: the step runs the function it is handed
_STEP_SITE = re.compile(r"(?<=\.)step\s*\(\s*(?:closure\s*=\s*)?(?:self\s*\.\s*)?([A-Za-z_]\w*)\s*[,)]")


class _LineMarks:
    """The steps of :class:`._builder._Builder` that mark lines by text (see the module's docstring)."""

    def _mark_sum_lines(self) -> None:
        """Calls that sum rather than average (``reduction="sum"``), and the names bound to them."""
        m = self.m
        words = lines_of(m.source, find_all(m.source, ("reduction", "size_average")))
        if not words:
            return
        lines = set()
        for node in walk_lines(m.tree, words):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and _sums(node.value):
                m.sum_losses.update(terminal(t) for t in node.targets)
            if isinstance(node, ast.Call) and _sums(node):
                lines.add(node.lineno)
        m._sum_lines = sorted(lines)

    def _mark_helper_calls(self) -> None:
        """Lines that call a helper holding events are interesting too (to a fixed point);
        likewise for the lines that (through helpers) can reach a backward pass."""
        m = self.m
        helpers = list(m.functions.items()) + [(n, f) for ms in m.methods.values() for n, f in ms.items()]
        m._backward_lines = lines_of(m.source, find_all(m.source, ("backward",)))
        if self.foreign_backward:
            m._backward_lines = sorted(set(m._backward_lines).union(self.foreign_backward))
        # `loss_scaler(loss, optimizer, update_grad=(i + 1) % K == 0)`: a call of code we cannot see
        # that back-propagates and steps (see _events.conditional_step)
        stepping = [
            n.lineno for n in walk_lines(m.tree, m.word_lines(("%",)))
            if isinstance(n, ast.Call) and conditional_step(n) is not None
        ]
        if stepping:
            m._backward_lines = sorted(set(m._backward_lines).union(stepping))
            m._add_positions([m.line_offset(line) for line in stepping])
        if not helpers and not m.classes:
            return
        callables = [c for c in m.classes.values() if "__call__" in m.methods.get(id(c), ())]
        if callables and self.class_calls:
            # `loss_scaler = NativeScaler()` ... `loss_scaler(loss, optimizer)`: the call runs __call__
            self._bound = True
            self._bind_instances()
            objects = {n: ms["__call__"] for n, ms in m.instances.items() if n.isidentifier() and "__call__" in ms}
            if objects:
                helpers += list(objects.items())
                sites = self._call_sites()
                for match in re.finditer(r"\b(%s)\s*\(" % "|".join(map(re.escape, objects)), m.source):
                    sites.add(match.group(1), match.start())
        m._lines = _propagate(m, m._lines, helpers, self._call_sites)
        m._backward_lines = _propagate(m, m._backward_lines, helpers, self._call_sites)

    def _call_sites(self) -> "_CallSites":
        """Where each function, method and class of the module is called (searched on the first question)."""
        sites = self.__dict__.get("_sites")
        if sites is None:
            m = self.m
            names = set(m.functions) | set(m.classes) | {n for ms in m.methods.values() for n in ms}
            sites = self._sites = _CallSites(m.source, names)
        return sites

    @property
    def class_calls(self) -> List[int]:
        """The lines calling a class of this module (read on the first question)."""
        calls = self.__dict__.get("_class_calls")
        if calls is None:
            sites = self._call_sites() if self.m.classes else None
            calls = self._class_calls = lines_of(self.m.source, [pos for name in self.m.classes for pos in sites[name]] if sites else [])
        return calls

    def _mark_closure_calls(self, fn: ast.AST, local: Dict[str, ast.AST]) -> None:
        """Lines of ``fn`` calling one of its closures that holds events are interesting too
        (``def opt_step(): optimizer.step()`` ... ``opt_step()``)."""
        m = self.m
        hot = [name for name, f in local.items() if m.interesting(f)]
        if not hot:
            return
        lines = m.scope_text(fn)
        start = m.line_offset(fn.lineno)
        pattern = re.compile(r"\b(?:%s)\s*\(" % "|".join(map(re.escape, hot)))
        positions = [start + match.start() for match in pattern.finditer(lines)]
        m._add_positions(positions)
        if any(overlaps(m._backward_lines, local[name]) for name in hot):
            m._backward_lines = sorted(set(m._backward_lines).union(lines_of(m.source, positions)))

    def _find_no_grad_callees(self) -> None:
        """Names of functions called inside ``with torch.no_grad():`` (their loops need no no_grad of their own)."""
        m = self.m
        # such a `with` names its context on its lines: only the nodes there are searched
        for node in walk_lines(m.tree, m.word_lines(NO_GRAD_WORDS)):
            if isinstance(node, (ast.With, ast.AsyncWith)) and no_grad_with(node):
                for inner in subtree(node):
                    if isinstance(inner, ast.Call):
                        self.no_grad_callees.add(terminal(inner.func))


#: Words one of which an optimizer's constructor (:func:`~._events.optimizer_constructor`) has on its
#: lines: ``optim`` (``torch.optim.X``) or a class name (the shortest: ``Adam`` is in ``AdamW``).
_CTOR_WORDS = ("optim",) + tuple(sorted(
    name for name in OPTIMIZER_CLASSES if not any(other != name and other in name for other in OPTIMIZER_CLASSES)
))
#: The names of the contexts that turn autograd off (:func:`~._ast.no_grad_with`).
NO_GRAD_WORDS = tuple(sorted(NO_GRAD_CONTEXTS)) + ("set_grad_enabled",)


class _CallSites:
    """``sites[name]``: the positions where a function, method or class of the module (one of
    ``names``) is called, as a search for ``_CALL_SITE`` finds them, and ``partial(name``
    (``optimizer.step(partial(self.training_step, ...))`` runs it too).

    A file's first few names are searched one at a time (``str.find``, far faster than a pass
    of the regular expression over every word of the text); asked for more, it reads every call
    of the text in one pass, so that the cost stays linear in the size of the file whatever
    the number of helpers."""

    #: names searched one at a time before the one pass over the whole text (which costs about
    #: as much as 40 to 60 searches for one name, measured on torch's own modules)
    ONE_AT_A_TIME = 48

    def __init__(self, source: str, names):
        self.source, self.names = source, names
        self.searched: Dict[str, List[int]] = {}
        self.all_read = False
        #: sites found otherwise: ``partial(name``, and calls of objects (:meth:`add`)
        self.extra: Dict[str, List[int]] = {}
        if "partial" in source:
            for match in matches_at(_PARTIAL_SITE, source, find_all(source, ("partial",))):
                if match.group(1) in names:
                    self.add(match.group(1), match.start())
        if ".step" in source:
            for match in matches_at(_STEP_SITE, source, find_all(source, ("step",))):
                if match.group(1) in names:
                    self.add(match.group(1), match.start())

    def add(self, name: str, position: int) -> None:
        self.extra.setdefault(name, []).append(position)

    def __getitem__(self, name: str) -> List[int]:
        found = self.searched.get(name)
        if found is None:
            if name not in self.names or self.all_read or not _NAME_START.match(name):
                found = []  # (a name written from a non-ASCII letter is no call site: see _CALL_SITE)
            elif len(self.searched) < self.ONE_AT_A_TIME:
                found = self.searched[name] = _calls_of(self.source, name)
            else:
                self._read_all()
                found = self.searched.get(name, [])
        return found + self.extra.get(name, [])

    def _read_all(self) -> None:
        read: Dict[str, List[int]] = {}
        for match in _CALL_SITE.finditer(self.source):
            if match.group(1) in self.names:
                read.setdefault(match.group(1), []).append(match.start(1))
        self.searched, self.all_read = read, True


def _calls_of(source: str, name: str) -> List[int]:
    """Where ``name`` is called, as ``_CALL_SITE`` finds it: followed by ``(``, and not part of
    a longer name (before it, only digits or other non-ASCII word characters of its word)."""
    out, pos = [], source.find(name)
    while pos != -1:
        if _CALL_TAIL.match(source, pos + len(name)):
            start = pos
            while start and _WORD.match(source, start - 1) and not _NAME_START.match(source, start - 1):
                start -= 1
            if not (start and _WORD.match(source, start - 1)):
                out.append(pos)
        pos = source.find(name, pos + 1)
    return out


_CALL_TAIL = re.compile(r"\s*\(")
_WORD = re.compile(r"\w")
_NAME_START = re.compile(r"[A-Za-z_]")


def _propagate(m: "Module", lines: List[int], helpers, sites: Callable[[], "_CallSites"]) -> List[int]:
    """``lines`` plus the call sites (``sites()``, asked only when a helper overlaps them) of every
    helper that overlaps them, to a fixed point (4 rounds)."""
    marked: set = set()
    for _ in range(4):
        fresh = {name for name, fn in helpers if name not in marked and overlaps(lines, fn) and sites()[name]}
        if not fresh:
            break
        marked |= fresh
        lines = sorted(set(lines).union(lines_of(m.source, [pos for name in fresh for pos in sites()[name]])))
    return lines


def _running_sum_lines(source: str) -> List[int]:
    """Lines that add into a running total (``total += x``): candidate evaluation loops. Whether what is
    added is a tensor with its graph is the rule's to say, from the values, not from the line's words."""
    return lines_of(source, find_all(source, ("+=",)))


def _sums(call: ast.Call) -> bool:
    """A loss constructor or call that does not average: ``reduction="sum"``/``"none"``, ``size_average=False``
    (``"batchmean"``, KL divergence's mean over the batch, averages)."""
    for k in call.keywords:
        if k.arg == "reduction" and not (isinstance(k.value, ast.Constant) and k.value.value in ("mean", "batchmean")):
            return True
        if k.arg == "size_average" and isinstance(k.value, ast.Constant) and k.value.value is False:
            return True
    return False
