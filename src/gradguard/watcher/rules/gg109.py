"""GG109 batch statistics: accumulating micro-batches through layers that normalise by the micro-batch.

The rule follows the modules the watch sees running: on each batch-statistics
layer (BatchNorm and kin) it puts a forward hook that notes when the layer last
normalised with batch statistics. An accumulation window of a step whose model
holds such a layer, run since that optimizer's previous step, is reported.
"""

from __future__ import annotations

from typing import Dict, List

import torch

from .._view import StepView, at, plural

CODE = "GG109"
#: The events this rule listens to (see the package's docstring), each with its place among that event's rules.
EVENTS = {"at_window": 10}

_BATCH_STATS = (torch.nn.modules.batchnorm._BatchNorm,)


class State:
    """The batch-statistics layers seen, and when each last ran with batch statistics."""

    def __init__(self, clock):
        self.clock = clock  # the watch's event clock
        self.layers: Dict[int, torch.nn.Module] = {}
        self.ran: Dict[int, int] = {}  # id(layer) -> clock when it last ran with batch statistics
        self.hooks: list = []

    def on_module(self, module: torch.nn.Module) -> None:
        if isinstance(module, _BATCH_STATS) and id(module) not in self.layers:
            self.layers[id(module)] = module
            self.hooks.append(module.register_forward_hook(self._forward))

    def _forward(self, module, args, output) -> None:
        # Batch statistics are used in training mode, and always without running stats.
        if module.training or getattr(module, "running_mean", None) is None:
            self.ran[id(module)] = self.clock() + 1

    def close(self) -> None:
        for h in self.hooks:
            h.remove()
        self.hooks = []

    def since_last_step(self, view: StepView) -> List[torch.nn.Module]:
        """Batch-statistics layers that ran since the optimizer's last step and belong to a model it trains."""
        if not self.ran:
            return []
        ost = view.ost
        ran = [self.layers[mid] for mid, t in self.ran.items() if t > ost.clock]
        return [m for m in ran if _feeds(m, ost.ids, view.modules)]


def _feeds(layer: torch.nn.Module, ids: frozenset, modules) -> bool:
    if any(id(p) in ids for p in layer.parameters()):
        return True
    for m in modules:
        if m is layer or not any(id(p) in ids for p in m.parameters()):
            continue
        if any(sub is layer for sub in m.modules()):
            return True
    return False


def at_window(view: StepView, site, group) -> None:
    layers = view.memory[CODE].since_last_step(view)
    if layers:
        names = sorted({type(m).__name__ for m in layers})
        view.report(
            CODE,
            f"{view.name}.step() (step {view.n}) accumulated {len(group)} backward passes from {at(site, site)} through "
            f"{plural(len(layers), 'layer')} using batch statistics in training mode ({', '.join(names)}).",
            site, view.n, [p for m in layers for p in m.parameters()] or view.with_grad,
        )
