"""GG108 graph in .grad: backward(create_graph=True) left autograd graphs in the buffers a step reads."""

from __future__ import annotations

from .._view import StepView, plural

CODE = "GG108"


def at_step(view: StepView) -> None:
    if view.graph:
        view.report(
            CODE,
            f"At {view.name}.step() (step {view.n}) the .grad of {plural(len(view.graph), 'parameter')} requires grad: "
            "it holds an autograd graph (backward(create_graph=True)).",
            view.site, view.n, view.graph,
        )
