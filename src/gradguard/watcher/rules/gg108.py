"""GG108 graph in .grad: backward(create_graph=True) left autograd graphs in the buffers an update reads.

Read at an optimizer step (the ``.grad`` it is about to apply requires grad),
and for updates written by hand, which no step marks: after a
``backward(create_graph=True)`` pass the rule notes the parameters whose
``.grad`` then holds a graph; when they are next seen changed in place
without a watched optimizer step in between (at the next backward pass or at
the end of the watch), they were updated from that gradient, and it is
reported at the backward line, with the number of such updates as its step.
"""

from __future__ import annotations

from .._view import EndView, StepView, at, plural

CODE = "GG108"
#: The events this rule listens to (see the package's docstring), each with its place among that event's rules.
EVENTS = {"at_step": 20, "after_graph_pass": 10, "at_end": 40}


class State:
    """Whether a ``backward(create_graph=True)`` was seen, and its passes whose ``.grad`` held a graph."""

    def __init__(self, clock=None):
        self.graphs = False
        self.kept: list = []  # (pass, the parameters whose .grad held a graph right after it, moved since)
        self.updates = 0  # updates by hand found reading a graph in .grad

    def before_pass(self, ps) -> None:
        self.graphs = self.graphs or ps.create_graph
        if self.kept:
            # Before the next pass: parameters changed since were updated from the graph (reported at
            # the next judgement); else, if the graph is no longer in .grad (cleared), no later update
            # can read it, and this pass's gradient may be replaced by a clean one.
            kept = []
            for ps0, held, moved in self.kept:
                if moved or ps0.moved():
                    kept.append((ps0, held, True))
                elif any(p.grad is not None and p.grad.requires_grad for p in held):
                    kept.append((ps0, held, False))
            self.kept = kept

    def after_step(self, ost, passes, by_hand) -> None:
        # A watched step moved these parameters: at_step judged the .grad it read.
        self.kept = [entry for entry in self.kept if ost.ids.isdisjoint(map(id, entry[1]))]


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


def _judge(report, memory: State) -> None:
    """Report the kept passes whose parameters were since changed in place: updated by hand."""
    still = []
    for ps, held, moved in memory.kept:
        if ps.used:
            continue  # an optimizer step applied it: judged there
        if not (moved or ps.moved()):
            still.append((ps, held, False))
            continue
        memory.updates += 1
        report(
            CODE,
            f"{plural(len(held), 'parameter')} updated by hand after the backward(create_graph=True) at "
            f"{at(ps.site, ps.site)} (update {memory.updates}) read a .grad that requires grad: it holds an "
            "autograd graph.",
            ps.site, memory.updates, held,
        )
    memory.kept = still[-8:]


def after_graph_pass(ps, report, memory: dict) -> None:
    state = memory[CODE]
    _judge(report, state)  # the updates since the previous such pass
    held = [p for p, _ in ps.pver if p.grad is not None and p.grad.requires_grad]
    if held:
        state.kept.append((ps, held, False))


def at_end(view: EndView) -> None:
    _judge(view.report, view.memory[CODE])
