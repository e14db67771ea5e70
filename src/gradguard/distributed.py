"""How an :class:`~gradguard.Accumulator` talks to other processes.

The accumulator keeps the window's bookkeeping; a *sync* object decides what
crosses process boundaries. :class:`LocalSync` is the one-process case
(nothing to do), :class:`DDPSync` wraps ``DistributedDataParallel`` and
:class:`FSDP2Sync` a ``fully_shard`` model. :func:`sync_for` picks the right
one for the ``model`` the user passed; passing a sync object as ``model``
selects it explicitly (that is how the FSDP2 mode is chosen; the default defers
the reduce-scatter to the window's end, as ``acc.microbatch()`` promises)::

    acc = gg.Accumulator(opt, steps=8, model=FSDP2Sync(model, defer_reduce=False))

Everything goes through ``torch.distributed`` and the wrappers' public switches
(``DistributedDataParallel.no_sync``, ``FSDPModule.set_requires_gradient_sync``,
``unshard``/``reshard``); nothing here reimplements DDP or FSDP.

The contract a sync object honours (the accumulator calls nothing else):

* ``world_size``: number of ranks whose data form one window.
* ``grads_averaged``: True when the framework divides reduced gradients by
  ``world_size`` (DDP, FSDP2 by default), so the accumulator multiplies that
  factor back in when it normalises by the global item count.
* ``defers_sync``: True when ``microbatch(False)`` really suppresses gradient
  sync (so a micro-batch run inside it has not been reduced).
* ``needs_empty_backward``: True when a micro-batch with 0 items must still
  run a backward pass: with gradient sync its rank has to join the collectives
  the other ranks start from their backward hooks, and FSDP2's state machine
  expects a backward after each training forward even without sync.
* ``accumulates_into_params``: True when autograd writes every backward
  pass's gradient into the optimizer's parameters themselves (one process,
  DDP), so a pass that leaves them untouched reached none of them; False for
  FSDP2, whose passes accumulate into unsharded copies.
* ``checks_across_ranks``: True when, on several ranks, the Accumulator can check
  the window's ``.grad`` between passes (DDP, FSDP2: outside a synchronised pass
  only autograd's accumulation writes into ``.grad``); the finding then rides the
  window's header all-reduce (also Accelerate and Fabric on several processes, which run DDP, and
  DeepSpeed at stages 0 and 1). Default False: on several ranks, not checked.
* ``window_in_grad`` (optional): overrides ``grads_in_params`` for the self-check alone, where the
  window lives in ``.grad`` until its end but not after (DeepSpeed stage 1: its boundary reduction
  moves it into partitions).
* ``touched()``: the message of a change to the window that the driver saw made outside ``.grad``
  (DeepSpeed stage 3: a call of the ZeRO optimizer's ``zero_grad()`` in a window), read at the
  window's end; None by default.
* ``microbatch(ends_window)``: context manager around one micro-batch's
  forward and backward; suppresses gradient sync unless ``ends_window``.
* ``empty_backward(loss, params)``: called (when ``needs_empty_backward``)
  instead of back-propagating ``loss`` of a micro-batch with 0 items, inside
  ``microbatch()`` if the user uses it: runs the backward of ``loss`` with every gradient
  that reaches a parameter replaced by zeros (the loss of 0 items is usually
  0/0, so its real gradient is NaN).
* ``reduce_sum(t)``: sum of a small tensor over ranks (one collective).
* ``finish_window(params, last_synced)``: at the window's end, make every
  rank's gradients the reduced ones even if the last micro-batch ran without
  sync (a partial window stepped by ``flush()``).
* ``backward(loss)``: back-propagate one micro-batch's (weighted, scaled)
  loss. Plain ``loss.backward()``; a framework whose own backward must run
  (an accelerator's) overrides it.
* ``grads_in_params``: True when the window's gradients are in each
  parameter's ``.grad`` (so the Accumulator can see whether a loss reached
  them, rescale them mid-window and save them); False where a framework
  keeps them in its own partitions (DeepSpeed ZeRO).
* ``scale_grads(params, factor)``: the end-of-window normalising multiply of
  the reduced gradient (a foreach multiply of ``.grad``; a framework that
  keeps gradients elsewhere overrides it).
* ``clip_grad_norm_(params, max_norm)``: clip the window's total gradient
  norm, return the norm before clipping (``torch.nn.utils.clip_grad_norm_``).
* ``step(optimizer, scaler)``: the optimizer step of a window
  (``scaler.step(optimizer)`` with a GradScaler, else ``optimizer.step()``).
* ``settle(params)``: before ``state_dict()`` saves in-flight gradients, make
  sure they are in ``.grad`` (FSDP2 with deferred reduction keeps them inside
  FSDP: it reduces them now, which is exact because reduction is linear; a
  collective, so every rank calls ``state_dict()``). DDP: nothing to do, the
  in-flight gradients are each rank's own, in ``.grad``.

Every rank must run the same number of micro-batches per window, and the
model's forward on each of them (a batch whose targets are all ignored is
fine): the collectives are matched by order, not by name.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager, nullcontext
from typing import ContextManager, Iterator, List, Optional, Sequence

import torch

from ._errors import GradguardError

__all__ = ["LocalSync", "DDPSync", "FSDP2Sync", "sync_for"]

# torch.autograd.backward as torch defines it (a running watch, or another tool, may wrap it); None when
# something had wrapped it before gradguard was imported: the public call is then always taken.
_AUTOGRAD_BACKWARD = torch.autograd.backward if getattr(getattr(torch.autograd.backward, "__code__", None), "co_filename", None) \
    == getattr(torch.autograd, "__file__", "") else None
# The engine call torch.autograd.backward ends in (private; where a torch lacks it, the public path is taken).
_run_backward = getattr(getattr(torch.autograd, "graph", None), "_engine_run_backward", None)


class LocalSync:
    """One process: nothing to synchronise."""

    world_size = 1
    grads_averaged = False
    defers_sync = False
    #: True when `empty_backward` must run for a 0-item micro-batch.
    needs_empty_backward = False
    accumulates_into_params = True
    checks_across_ranks = False
    #: True when the window's gradients are in each parameter's ``.grad``.
    grads_in_params = True

    def microbatch(self, ends_window: bool) -> ContextManager:
        return nullcontext()

    def empty_backward(self, loss: torch.Tensor, params: List[torch.Tensor]) -> None:
        pass

    def reduce_sum(self, t: torch.Tensor) -> torch.Tensor:
        return t

    def backward(self, loss: torch.Tensor, weight: float = 1.0) -> None:
        """Back-propagate ``weight * loss``.

        d(weight * loss) = weight * d(loss): seeding the pass with the weight gives
        the gradient of ``(loss * weight).backward()`` bit for bit (the same value in
        the loss's dtype reaches the graph), without the multiply, its autograd node
        and the seed of ones.
        """
        if weight == 1:
            loss.backward()
        elif torch.autograd.backward is _AUTOGRAD_BACKWARD and _run_backward is not None and type(loss) is torch.Tensor \
                and not torch._C._are_functorch_transforms_active():
            # What torch.autograd.backward(loss, seed) runs once its argument checks pass (a plain
            # scalar tensor, a seed made like it: they always pass here), without them: they cost
            # more per micro-batch than the rest of the Accumulator's own work on a small model.
            # Only while nobody wraps torch.autograd.backward (a running watch does: it then sees
            # the pass through the wrapper, as before).
            _run_backward((loss,), (torch.full_like(loss, weight),), False, False, (),
                          allow_unreachable=True, accumulate_grad=True)
        else:
            torch.autograd.backward(loss, torch.full_like(loss, weight))

    def scale_grads(self, params: List[torch.Tensor], factor: float) -> None:
        grads = [p.grad for p in params if p.grad is not None]
        if grads:
            torch._foreach_mul_(grads, factor)

    def clip_grad_norm_(self, params: List[torch.Tensor], max_norm: float) -> torch.Tensor:
        return torch.nn.utils.clip_grad_norm_(params, max_norm)

    def step(self, optimizer: torch.optim.Optimizer, scaler=None) -> None:
        if scaler is None:
            optimizer.step()
        else:
            scaler.step(optimizer)

    def finish_window(self, params: List[torch.Tensor], last_synced: bool) -> None:
        pass

    def settle(self, params: List[torch.Tensor]) -> None:
        pass

    def touched(self) -> Optional[str]:
        """The message of a change to the window's gradients that this driver saw made behind the Accumulator's back
        (where they live outside ``.grad``); None: none seen. Read once, at the window's end."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(world_size={self.world_size})"


class DDPSync(LocalSync):
    """Sync for a ``torch.nn.parallel.DistributedDataParallel`` model.

    Micro-batches that do not end the window run under ``model.no_sync()``;
    the one that ends it lets DDP all-reduce (and average) the accumulated
    ``.grad`` with its usual bucketed, overlapped all-reduce: one gradient
    reduction per optimizer step. A partial window stepped by ``flush()``
    ended under ``no_sync``; :meth:`finish_window` then averages the gradients
    itself, as DDP would have.

    Args:
        model: the DDP-wrapped model.

    >>> sync = DDPSync(ddp_model)                      # doctest: +SKIP
    >>> acc = gg.Accumulator(opt, steps=4, model=sync)  # same as model=ddp_model  # doctest: +SKIP
    """

    grads_averaged = True
    needs_empty_backward = True
    checks_across_ranks = True

    def __init__(self, model: torch.nn.Module) -> None:
        import torch.distributed as dist

        self.model = model
        self.group = model.process_group
        self.world_size = dist.get_world_size(self.group)
        # DDP with one rank still all-reduces; deferring buys nothing there.
        self.defers_sync = self.world_size > 1

    def microbatch(self, ends_window: bool) -> ContextManager:
        if ends_window or not self.defers_sync:
            return nullcontext()
        return self.model.no_sync()

    def empty_backward(self, loss: torch.Tensor, params: List[torch.Tensor]) -> None:
        leaves = zeroed_backward(loss)
        if leaves == 0:
            # The loss does not depend on the model (e.g. a constant for an empty
            # batch). DDP's reducer still waits for every parameter's gradient:
            # give each one an exact zero through its own grad accumulator.
            used = [p for p in self.model.parameters() if p.requires_grad]
            torch.autograd.backward(sum(p.sum() * 0 for p in used))

    def reduce_sum(self, t: torch.Tensor) -> torch.Tensor:
        import torch.distributed as dist

        t = t.clone()
        dist.all_reduce(t, op=dist.ReduceOp.SUM, group=self.group)
        return t

    def finish_window(self, params: List[torch.Tensor], last_synced: bool) -> None:
        if last_synced or self.world_size == 1:
            return
        params = [p for p in params if p.requires_grad]
        reduced = mean_over_ranks([p.grad for p in params], params, [self.group], self.world_size)
        for p, g in zip(params, reduced):
            if g is None:
                continue
            if p.grad is None:
                p.grad = g
            else:
                # In place: with gradient_as_bucket_view=True, .grad is a view
                # into DDP's bucket and must stay one.
                p.grad.copy_(g)


class FSDP2Sync(LocalSync):
    """Sync for an FSDP2 model (``torch.distributed.fsdp.fully_shard``).

    Two modes:

    * ``defer_reduce=True`` (the default, what ``Accumulator(model=fsdp_model)``
      gets): micro-batches that do not end the window run with
      ``set_requires_gradient_sync(False)``; FSDP keeps each rank's *unsharded*
      gradient until the window's last micro-batch reduce-scatters it once.
      One reduction per optimizer step, like DDP, at the price of a full
      gradient's memory per rank during the window. A partial window stepped
      by ``flush()`` is reduced here (parameters unsharded, gradients averaged,
      each rank keeps its shard, resharded).
    * ``defer_reduce=False``: every micro-batch reduce-scatters into the
      sharded ``.grad``, so each rank only ever holds its shard of the
      gradient: less memory, one reduce-scatter per micro-batch.

    Args:
        model: the root module ``fully_shard`` was applied to.
        defer_reduce: see above.

    >>> acc = gg.Accumulator(opt, steps=8, model=FSDP2Sync(model, defer_reduce=False))  # doctest: +SKIP
    """

    grads_averaged = True
    needs_empty_backward = True
    accumulates_into_params = False
    # Outside a synchronised pass only the user can write the optimizer's sharded .grad: with
    # defer_reduce=False every pass reduce-scatters into it (checked before, recorded after each);
    # deferred, the window's gradients stay inside FSDP until its last pass (a clearing of the
    # optimizer's .grad before then finds nothing to clear).
    checks_across_ranks = True

    def __init__(self, model: torch.nn.Module, *, defer_reduce: bool = True) -> None:
        from torch.distributed.fsdp import FSDPModule

        if not isinstance(model, FSDPModule):
            raise GradguardError(
                f"FSDP2Sync needs the root module that fully_shard() was applied to, got {type(model).__name__}"
            )
        self.model = model
        self.defer_reduce = bool(defer_reduce)
        mesh = _fsdp_mesh(model)
        # HSDP meshes are (replicate, shard): the data-parallel ranks are all of them.
        self.groups = [mesh.get_group(d) for d in range(mesh.ndim)]
        self.world_size = mesh.size()
        self.defers_sync = self.defer_reduce and self.world_size > 1

    def __repr__(self) -> str:
        return f"FSDP2Sync(world_size={self.world_size}, defer_reduce={self.defer_reduce})"

    @contextmanager
    def _no_reduce(self) -> Iterator[None]:
        self.model.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            self.model.set_requires_gradient_sync(True)

    def microbatch(self, ends_window: bool) -> ContextManager:
        if ends_window or not self.defers_sync:
            return nullcontext()
        return self._no_reduce()

    def empty_backward(self, loss: torch.Tensor, params: List[torch.Tensor]) -> None:
        if zeroed_backward(loss) == 0:
            raise GradguardError(
                "a micro-batch with count=0 must still run FSDP's backward (and join its reduce-scatter), but its loss "
                "does not depend on the model: compute the loss from the model's output even for an empty batch "
                "(e.g. cross-entropy over targets that are all ignore_index)"
            )

    def reduce_sum(self, t: torch.Tensor) -> torch.Tensor:
        import torch.distributed as dist

        t = t.clone()
        for group in self.groups:
            dist.all_reduce(t, op=dist.ReduceOp.SUM, group=group)
        return t

    def finish_window(self, params: List[torch.Tensor], last_synced: bool) -> None:
        if not last_synced and self.defers_sync:
            self._reduce_deferred()

    def settle(self, params: List[torch.Tensor]) -> None:
        # Reduction is linear: reducing the deferred part now and the rest at the
        # window's end (FSDP adds into an existing sharded .grad) gives the same sum.
        if self.defers_sync:
            self._reduce_deferred()

    def _reduce_deferred(self) -> None:
        """Average the deferred unsharded gradients over ranks into each rank's sharded ``.grad``."""
        from torch.distributed.fsdp import FSDPModule
        from torch.distributed.tensor import distribute_tensor

        fsdp_modules = [m for m in self.model.modules() if isinstance(m, FSDPModule)]
        # reshard() first: a rank whose last micro-batch ran a forward and no backward
        # may still have an unsharded root, and its unshard() would then skip the
        # all-gather the other ranks run. Gradients survive resharding.
        for m in fsdp_modules:
            m.reshard()
        sharded = [(name, p) for name, p in self.model.named_parameters() if p.requires_grad]
        # The deferred gradients sit on the unsharded parameters; unshard() (public)
        # registers those on the modules again so that they can be reached by name.
        for m in fsdp_modules:
            m.unshard()
        try:
            unsharded = dict(self.model.named_parameters())
            full = [unsharded[name] for name, _ in sharded]
            internals = _fsdp_params_by_unsharded(fsdp_modules)
            grads, dtypes = [], []
            for u in full:
                g, fp = u.grad, internals.get(id(u))
                # With MixedPrecisionPolicy(reduce_dtype != param_dtype) FSDP moves the
                # deferred gradient to FSDPParam.unsharded_accumulated_grad (private; no
                # public accessor in torch 2.13): read it there, in the dtype FSDP reduces in.
                pending = getattr(fp, "unsharded_accumulated_grad", None)
                if pending is not None:
                    g = pending if g is None else pending + g.to(pending.dtype)
                dtypes.append(getattr(fp, "reduce_dtype", None) or u.dtype)
                grads.append(g)
            reduced = mean_over_ranks(grads, full, self.groups, self.world_size, dtypes)
            for (name, sp), u, g in zip(sharded, full, reduced):
                # FSDP must not reduce these again at the next synced backward.
                u.grad = None
                fp = internals.get(id(u))
                if getattr(fp, "unsharded_accumulated_grad", None) is not None:
                    fp.unsharded_accumulated_grad = None
                if g is None:
                    continue
                # Every rank holds the same averaged tensor: each keeps its own shard, no communication.
                shard = distribute_tensor(g.to(sp.dtype), sp.device_mesh, sp.placements, src_data_rank=None)
                if sp.grad is None:
                    sp.grad = shard
                else:
                    sp.grad.add_(shard)
        finally:
            for m in fsdp_modules:
                m.reshard()


def sync_for(model) -> LocalSync:
    """The sync object for ``model`` (``None``, a plain module, DDP, FSDP2, or a sync object).

    Args:
        model: what was passed to ``Accumulator(model=...)``. A sync object
            (e.g. ``FSDP2Sync(model, defer_reduce=False)``) is returned as is.

    Returns:
        :class:`DDPSync` for ``DistributedDataParallel``, :class:`FSDP2Sync`
        (deferred reduction) for a ``fully_shard`` root, else :class:`LocalSync`.

    Raises:
        GradguardError: for FSDP1 (``FullyShardedDataParallel``), which is not supported.

    >>> sync_for(torch.nn.Linear(2, 1))
    LocalSync(world_size=1)
    """
    if model is None:
        return LocalSync()
    if isinstance(model, LocalSync):
        return model
    if not isinstance(model, torch.nn.Module):
        raise GradguardError(f"model must be a torch.nn.Module, a gradguard sync object or None, got {type(model).__name__}")
    if not torch.distributed.is_available():
        return LocalSync()
    from torch.nn.parallel import DistributedDataParallel

    if isinstance(model, DistributedDataParallel):
        return DDPSync(model)
    if "torch.distributed.fsdp" not in sys.modules:
        # No FSDP model exists before its package is imported (importing it here took ~0.7 s of CPU).
        return LocalSync()
    try:
        from torch.distributed.fsdp import FSDPModule, FullyShardedDataParallel
    except ImportError:  # torch without FSDP2
        return LocalSync()
    if isinstance(model, FSDPModule):
        return FSDP2Sync(model)
    if isinstance(model, FullyShardedDataParallel):
        raise GradguardError(
            "FSDP1 (FullyShardedDataParallel) is not supported: shard the model with "
            "torch.distributed.fsdp.fully_shard (FSDP2) and pass that root module"
        )
    return LocalSync()


# --------------------------------------------------------------------- helpers
def weighted(loss: torch.Tensor, weight: float) -> torch.Tensor:
    """``loss * weight``, with grad mode on (``acc.backward()`` works inside ``torch.no_grad()``, as ``loss.backward()`` does)."""
    if weight == 1:
        return loss
    with torch.enable_grad():
        return loss * weight


def zeroed_backward(loss: torch.Tensor, backward=None) -> int:
    """Back-propagate ``loss`` with every gradient reaching a leaf replaced by zeros.

    The wrappers' backward hooks (DDP's all-reduce, FSDP's reduce-scatter) run
    as usual, but nothing is added to ``.grad``: the loss of an empty
    micro-batch is 0/0 and its true contribution is exactly zero. Hooks are
    pre-hooks on the graph's ``AccumulateGrad`` nodes (public
    ``Node.register_prehook``), removed afterwards. ``backward`` runs the pass
    (default ``loss.backward()``; an engine that must run its own passes its
    own). Returns the number of leaves.
    """
    leaves = grad_leaves(loss)
    if not leaves:
        return 0

    def to_zeros(grad_outputs):
        return tuple(None if g is None else torch.zeros_like(g) for g in grad_outputs)

    handles = [node.register_prehook(to_zeros) for node in leaves]
    try:
        (backward or torch.Tensor.backward)(loss)
    finally:
        for h in handles:
            h.remove()
    return len(leaves)


def grad_leaves(loss: torch.Tensor) -> list:
    """The ``AccumulateGrad`` nodes of ``loss``'s graph (``node.variable`` is the leaf whose ``.grad`` they write)."""
    leaves, seen, stack = [], set(), [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if hasattr(node, "variable"):  # AccumulateGrad: the node that writes a leaf's .grad
            leaves.append(node)
        stack.extend(nxt for nxt, _ in node.next_functions)
    return leaves


def mean_over_ranks(
    grads: Sequence[Optional[torch.Tensor]],
    like: Sequence[torch.Tensor],
    groups: Sequence,
    world_size: int,
    dtypes: Optional[Sequence[torch.dtype]] = None,
) -> List[Optional[torch.Tensor]]:
    """Average per-parameter gradients over ranks; None where no rank has one.

    A rank may lack a gradient that others have (all its micro-batches were
    empty): it contributes zeros, so the collectives still match. Two rounds:
    which parameters have a gradient anywhere, then one flat all-reduce per
    (device, dtype), the way DDP buckets them. Only used for a partial window,
    so the flat copy's memory is paid rarely.
    """
    import torch.distributed as dist

    if not like:
        return []
    device = like[0].device
    present = torch.tensor([g is not None for g in grads], dtype=torch.int32, device=device)
    for group in groups:
        dist.all_reduce(present, op=dist.ReduceOp.SUM, group=group)
    anywhere = present.tolist()

    out: List[Optional[torch.Tensor]] = [None] * len(grads)
    buckets: dict = {}
    for i, p in enumerate(like):
        if anywhere[i]:
            # Bucket by what every rank knows (the parameter's device, the reduce dtype),
            # never by this rank's gradient: a rank without one must build the same buffers.
            buckets.setdefault((p.device, dtypes[i] if dtypes is not None else p.dtype), []).append(i)
    for (dev, dtype), idx in buckets.items():
        flat = torch.cat([
            (grads[i].detach().reshape(-1).to(dtype) if grads[i] is not None else torch.zeros(like[i].numel(), device=dev, dtype=dtype))
            for i in idx
        ])
        for group in groups:
            dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=group)  # gloo has no AVG
        flat.div_(world_size)
        offset = 0
        for i in idx:
            n = like[i].numel()
            out[i] = flat[offset : offset + n].view(like[i].shape).clone()
            offset += n
    return out


def _fsdp_params_by_unsharded(fsdp_modules) -> dict:
    """id(unsharded parameter) -> FSDP's private FSDPParam, where this torch exposes it (else empty)."""
    out = {}
    for m in fsdp_modules:
        try:
            groups = m._get_fsdp_state()._fsdp_param_groups
        except AttributeError:
            continue
        for group in groups:
            for fp in getattr(group, "fsdp_params", ()):
                u = getattr(fp, "_unsharded_param", None)
                if u is not None:
                    out[id(u)] = fp
    return out


def _fsdp_mesh(model: torch.nn.Module):
    """The device mesh of a fully_shard model, read from its sharded (DTensor) parameters."""
    for p in model.parameters():
        mesh = getattr(p, "device_mesh", None)
        if mesh is not None:
            return mesh
    raise GradguardError(f"{type(model).__name__} has no sharded (DTensor) parameters: was fully_shard() applied to it?")
