"""Which backward passes reach the Accumulator's optimizer: the reach hooks (a mixin of ``Accumulator``).

A loss that reaches none of the optimizer's parameters would be counted and add nothing, diluting
the window's gradient; :class:`Reach` hears each pass through post-accumulate-grad hooks (one
hooked parameter once every pass reaches it, the sentinel) and falls back to the loss's graph.
The window decides what to do with a pass that reached nothing (``Window.unreached``).
"""

from __future__ import annotations

import warnings
import weakref
from typing import List, Optional

import torch

from .distributed import grad_leaves


class Reach:
    """The reach hooks' state and logic; ``Accumulator`` calls :meth:`_init_reach` in its constructor."""

    def _init_reach(self) -> None:
        # A loss's reach: a post-accumulate-grad hook on each optimizer parameter appends
        # to this list (a builtin call, no Python frame); a backward that leaves it empty
        # reached none of them. (Reading every parameter's .grad and version before and
        # after each pass tells the same but measured dearer: a .grad read of an
        # nn.Parameter costs about as much as a hook call.) Only trusted once some pass did
        # reach one: under FSDP2 autograd accumulates into unsharded parameters, which the
        # hooks never see.
        # Once every pass of a window has reached one same parameter, only that one (the
        # sentinel) stays hooked: one hook call per pass, whatever the number of parameters.
        # A pass that misses it is decided from its loss's graph, and every parameter is
        # hooked again (see _after_pass).
        self._reached_by: list = []
        self._hook_handles: list = []
        self._hooked: Optional[int] = None  # number of parameters hooked (re-hooked when it changes)
        self._hooks_fire = False
        self._sentinel: Optional[torch.Tensor] = None  # the one parameter hooked, or None: all are
        self._common: Optional[set] = None  # ids of the parameters every pass since hooking all reached
        weakref.finalize(self, _remove_handles, self._hook_handles)

    def _hook(self, params: List[torch.Tensor], sentinel: Optional[torch.Tensor] = None) -> None:
        """Hear which backward passes accumulate into an optimizer parameter (a builtin append per hooked parameter).

        Every parameter, or only ``sentinel``. Only where autograd writes into the
        parameters themselves: not for sharded parameters (FSDP2's DTensors, FSDP1's
        flat parameters), whose gradients arrive by other ways and only at
        synchronised passes.
        """
        for h in self._hook_handles:
            h.remove()
        self._hooked = len(params)
        self._hook_handles[:] = []
        self._sentinel, self._common = sentinel, None
        if not getattr(self._sync, "accumulates_into_params", False) or any(_sharded(p) for p in params):
            return
        hooked = [sentinel] if sentinel is not None else [p for p in params if p.requires_grad]
        self._hook_handles[:] = [p.register_post_accumulate_grad_hook(self._reached_by.append) for p in hooked]

    def _after_pass(self, reached: list, root: torch.Tensor) -> bool:
        """After a backward pass that succeeded: False when it reached none of the optimizer's parameters."""
        if reached:
            self._hooks_fire = True
            if self._sentinel is None and self._common != set():  # learning what every pass reaches
                ids = set(map(id, reached))
                self._common = ids if self._common is None else self._common & ids
            return True
        if self._sentinel is not None:
            # The pass missed the one parameter still hooked: its loss's graph tells whether
            # it reached another; from now on every parameter is hooked again.
            params = self._params()
            self._hook(params)
            mine = set(map(id, params))
            return any(id(node.variable) in mine for node in grad_leaves(root))
        if not self._hooks_fire:
            return True  # hooks that never fired (FSDP2) say nothing
        # Every parameter that needed a gradient when hooked is hooked, and none was heard: the
        # loss's graph tells whether the pass reached one unfrozen since (hooked at the next window).
        mine = set(map(id, self._params()))
        return any(id(node.variable) in mine for node in grad_leaves(root))

    def _report_outside_leaves(self, loss: torch.Tensor, params: List[torch.Tensor]) -> None:
        """Warn (once) when the loss also reaches tensors that this Accumulator's optimizer does not hold.

        Their ``.grad`` gets the window's in-flight sum, never normalised nor cleared
        by the Accumulator: a second optimizer stepping them would use a wrong gradient.
        """
        mine = {id(p) for p in params}
        leaves = [node.variable for node in grad_leaves(loss)]
        outside = [t for t in leaves if id(t) not in mine]
        if not outside or len(outside) == len(leaves):  # none, or sharded parameters (FSDP2): nothing to say
            return
        shapes = ", ".join(str(tuple(t.shape)) for t in outside[:4]) + (", ..." if len(outside) > 4 else "")
        warnings.warn(
            f"the loss reaches {len(outside)} tensors requiring grad (shapes {shapes}) that are not in the "
            "Accumulator's optimizer: the Accumulator normalises and clears only its optimizer's gradients, so "
            "their .grad holds the window's un-normalised sum. If another optimizer steps them, pass one optimizer "
            "holding all of them (parameter groups can have their own lr); if they are frozen, set "
            "requires_grad_(False) on them. (Checked once, on the first backward().)",
            UserWarning,
            stacklevel=4,
        )


def _remove_handles(handles: list) -> None:
    for h in handles:
        h.remove()


def _sharded(p: torch.Tensor) -> bool:
    """A DTensor (FSDP2, tensor parallel) or FSDP1's flat parameter."""
    return type(p).__name__ in ("DTensor", "FlatParameter") or hasattr(p, "device_mesh")
