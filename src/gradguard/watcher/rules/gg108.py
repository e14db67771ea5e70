"""GG108 graph in .grad: backward(create_graph=True) left autograd graphs in the buffers a step reads."""

from __future__ import annotations

from .._view import StepView, plural

CODE = "GG108"


class State:
    """Whether a ``backward(create_graph=True)`` was seen: only then can ``.grad`` hold a graph."""

    def __init__(self, clock=None):
        self.graphs = False

    def before_pass(self, ps) -> None:
        self.graphs = self.graphs or ps.create_graph


def at_step(view: StepView) -> None:
    if not view.memory[CODE].graphs:
        return
    graph = [p for p, g in zip(view.params, view.grads) if g is not None and g.requires_grad]
    ids = set(map(id, view.with_grad))
    graph = [p for p in graph if id(p) in ids]
    if graph:
        view.report(
            CODE,
            f"At {view.name}.step() (step {view.n}) the .grad of {plural(len(graph), 'parameter')} requires grad: "
            "it holds an autograd graph (backward(create_graph=True)).",
            view.site, view.n, graph,
        )
