"""GG114 leaked pass: the first step applied a pass that is none of the loop's own, on top of the window's.

An optimizer's first two steps tell the loop's lines: a line whose passes fed
both is the loop's. A line whose passes fed the first step only, all of them
made before the first of that window's loop-line passes, is a pass from before
the loop (or from evaluation code run before training) that nothing cleared.
Judged once per optimizer, at its second step, and reported as of step 1 at
the stray pass's line. Passes weighted by gradguard or made through a
framework's code are left out (a framework's own passes are its business).
"""

from __future__ import annotations

from .._view import StepView, at, plural

CODE = "GG114"
#: The events this rule listens to (see the package's docstring), each with its place among that event's rules.
EVENTS = {"at_step": 60}


class State:
    """Per optimizer (by its state's id): the passes its first step applied, as (index, site)."""

    def __init__(self, clock=None):
        self.first: dict = {}
        self.done: set = set()

    def after_step(self, ost, passes, by_hand) -> None:
        if ost.steps == 0 and id(ost) not in self.first:
            self.first[id(ost)] = [(ps.index, ps.site) for ps in passes.values() if not ps.managed and not ps.framework]


def at_step(view: StepView) -> None:
    state: State = view.memory[CODE]
    key = id(view.ost)
    if view.n != 2 or key in state.done or key not in state.first:
        return
    state.done.add(key)
    first = state.first.pop(key)
    second = {ps.site for ps in view.passes.values() if not ps.managed and not ps.framework}
    loop_lines = {site for _, site in first if site in second}
    if not loop_lines:
        return
    start = min(i for i, site in first if site in loop_lines)
    stray = [(i, site) for i, site in first if site not in second]
    if not stray or any(i > start for i, _ in stray):
        return  # a line that also ran inside the window (an extra loss on the first iteration): not judged
    site = stray[0][1]
    loop_site = next(s for i, s in first if i == start)
    view.report(
        CODE,
        f"{view.name}.step() (step 1) applied {plural(len(stray), 'backward pass', 'backward passes')} made at "
        f"{at(site, site)} before the loop's own passes (at {at(loop_site, site)}), which no later step applies: "
        "nothing cleared .grad between them.",
        site, 1, view.with_grad,
    )
