"""GG202 graph in buffer: a module's buffer or tensor attribute holds a graph that reaches an earlier step's.

At every optimizer step the rule reads the buffers and the plain tensor
attributes of the modules the watch saw run whose class is the user's (torch's
own layers keep their statistics without a graph), each module's own, not its
children's, so that each is read once. A tensor there with a ``grad_fn`` carries an autograd
graph; its node is marked (in the node's ``metadata``, which holds no reference
to anything) with the step it was seen at. When at a later step the tensor found
there has a graph that reaches a marked node within a few hundred nodes, its
value was computed from the earlier one, graph and all: every step's graph stays
chained in the buffer, and it is reported once, at that step. A graph stored for
one step and replaced by the next forward (an activation kept for a loss) reaches
no mark and is left alone; so are BatchNorm's own statistics, which hold no graph.
"""

from __future__ import annotations

from collections import deque
from typing import Optional

import torch

from .._view import StepView

CODE = "GG202"
#: The events this rule listens to (see the package's docstring), each with its place among that event's rules.
EVENTS = {"at_every_step": 30}
#: The key of the mark in a node's ``metadata``.
_MARK = "gradguard.GG202"
#: How many graph nodes one tensor's search reads at most (the previous value sits a few operations deep).
_SEARCH = 512


class State:
    """The places already reported, by (id(module), attribute)."""

    def __init__(self, clock=None):
        self.reported: set = set()


def _tensors(module: torch.nn.Module):
    """(attribute, tensor) for a module's own buffers and plain tensor attributes (parameters left out)."""
    for name, t in module._buffers.items():
        if t is not None:
            yield name, t
    for name, t in vars(module).items():
        if type(t) is torch.Tensor:  # (a Parameter is a subclass: left out)
            yield name, t


def _own_code(cls, cache={}) -> bool:  # noqa: B006  (one cache for the process: classes do not change module)
    """Whether ``cls`` is defined outside torch: torch's own layers update their statistics without a graph
    (BatchNorm's through ``F.batch_norm``), so only the user's classes are read, which keeps a step's cost
    in proportion to them rather than to the model's size."""
    own = cache.get(cls)
    if own is None:
        own = cache[cls] = not (cls.__module__ or "").startswith("torch.")
    return own


def _marked(node) -> Optional[int]:
    """The step of the first marked node within :data:`_SEARCH` nodes of ``node`` (breadth first), or None."""
    todo, seen = deque([node]), {id(node)}
    # the nodes stay referenced by ``todo`` while searched, so no id is reused within one search
    keep = []
    while todo and len(seen) <= _SEARCH:
        n = todo.popleft()
        keep.append(n)
        mark = n.metadata.get(_MARK) if n is not node else None
        if mark is not None:
            return mark
        for nxt, _ in n.next_functions:
            if nxt is not None and id(nxt) not in seen:
                seen.add(id(nxt))
                todo.append(nxt)
    return None


def at_every_step(view: StepView) -> None:
    state: State = view.memory[CODE]
    for module in view.modules:
        if not _own_code(type(module)):
            continue
        for name, t in _tensors(module):
            node = t.grad_fn
            if node is None or (id(module), name) in state.reported:
                continue
            earlier = _marked(node)
            node.metadata[_MARK] = view.n
            if earlier is None:
                continue
            state.reported.add((id(module), name))
            view.report(
                CODE,
                f"At {view.name}.step() (step {view.n}) {type(module).__name__}.{name} holds an autograd graph that "
                f"reaches the one it held at step {earlier}: it was updated from its old value and a tensor that "
                "requires grad, so the graphs of every step stay chained in it.",
                view.site, view.n,
            )
