"""Plumbing shared by the GradBench cases: seeding, the dtype, and the numbers the runner reads.

Every case calls ``setup()`` first, ``start(...)`` once its parameters exist and
``done(...)`` at the end. Run by hand (no ``GRADBENCH_OUT`` in the environment) they only
seed, so each case stays a plain program that ``python case.py`` runs as it is.
Under the runner (``GRADBENCH_OUT=file``, ``GRADBENCH_DTYPE=float64``) they record the
initial and final parameters, the bytes of activations that autograd graphs still hold
at the end (saved-tensor hooks), and how many autograd nodes the tensors passed as
``kept`` still reach.
"""

from __future__ import annotations

import gc
import json
import os

import torch

_state = {"saved_bytes": 0, "initial": None}


class _Held:
    """A tensor autograd saved for backward; its bytes count as live until the graph frees it."""

    __slots__ = ("tensor", "nbytes", "version")

    def __init__(self, tensor):
        self.tensor = tensor
        self.nbytes = tensor.numel() * tensor.element_size()
        # autograd skips its own check that a saved tensor was not modified in place once a hook packs it;
        # the version is kept here so that the program fails under the runner exactly where plain PyTorch fails
        self.version = tensor._version
        _state["saved_bytes"] += self.nbytes

    def __del__(self):
        _state["saved_bytes"] -= self.nbytes


def _unpack(held):
    if held.tensor._version != held.version:
        raise RuntimeError(
            "one of the variables needed for gradient computation has been modified by an inplace operation: "
            f"[{held.tensor.type()} {list(held.tensor.shape)}] is at version {held.tensor._version}; "
            f"expected version {held.version} instead (GradBench's saved-tensor count keeps autograd's check)")
    return held.tensor


def setup(seed: int = 0) -> None:
    # GRADBENCH_SEED gives another correct run of the same program (other data and initialisation): TrainCheck's
    # invariants from one run of the twin are checked on a second one to count its false alarms
    torch.manual_seed(int(os.environ.get("GRADBENCH_SEED", seed)))
    torch.set_num_threads(1)
    if os.environ.get("GRADBENCH_DTYPE") == "float64":
        torch.set_default_dtype(torch.float64)
    if os.environ.get("GRADBENCH_OUT"):
        # entered for the rest of the process: every graph built from here on is counted
        torch.autograd.graph.saved_tensors_hooks(_Held, _unpack).__enter__()


def _flat(objs):
    tensors = []
    for obj in objs:
        params = obj.parameters() if isinstance(obj, torch.nn.Module) else [obj]
        tensors += [p.detach().reshape(-1).to(torch.float64).cpu() for p in params]
    return torch.cat(tensors) if tensors else torch.zeros(0, dtype=torch.float64)


def start(*objs) -> None:
    """Remember the initial parameters of the modules (or tensors) the case trains."""
    if os.environ.get("GRADBENCH_OUT"):
        _state["initial"] = _flat(objs).tolist()


def _graph_nodes(tensors) -> int:
    seen, todo = set(), [t.grad_fn for t in tensors if isinstance(t, torch.Tensor) and t.grad_fn is not None]
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        todo += [n for n, _ in node.next_functions]
    return len(seen)


def done(*objs, kept=()) -> None:
    """Write what the runner measures: parameters before and after, memory still held by graphs."""
    out = os.environ.get("GRADBENCH_OUT")
    if not out:
        return
    gc.collect()
    kept = list(kept) if isinstance(kept, (list, tuple)) else [kept]
    grads = [p.grad for o in objs for p in (o.parameters() if isinstance(o, torch.nn.Module) else [o])
             if p.grad is not None]
    final = _flat(objs)
    record = {
        "initial": _state["initial"],
        "final": final.tolist(),
        "finite": bool(torch.isfinite(final).all()),
        "saved_bytes": _state["saved_bytes"],
        "graph_nodes": _graph_nodes(kept + grads),
    }
    with open(out, "w") as f:
        json.dump(record, f)
