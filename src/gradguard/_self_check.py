"""The Accumulator's self-check: nothing but its own passes changed the window's ``.grad`` (a mixin).

After a window's first backward pass the Accumulator keeps each optimizer parameter's ``.grad``
(the tensor or None) and the versions of those that are tensors; when the window ends (and, on
several ranks, before each synchronised pass) every ``.grad`` that was a tensor must be the same
tensor, its version risen by at most its budget per pass since. Otherwise something else (a
``zero_grad()`` left in a ported loop, ``p.grad = None``, an in-place edit) changed the window's
sum, and the window is refused before anything is applied. The hot-path parts (the record after
the first pass, the end's all-is-well test) are inline in ``accumulate.py``; the rest is here.
"""

from __future__ import annotations

import sys
from functools import partial
from itertools import repeat
from operator import attrgetter, is_, is_not, sub
from typing import List, Optional, Tuple

import torch

from ._errors import GradguardError

grad_of = attrgetter("grad")
version_of = attrgetter("_version")
has_grad = partial(is_not, None)  # a .grad that is a tensor (a C call, no Python frame)


class SelfCheck:
    """The self-check's state and logic; ``Accumulator`` calls :meth:`_init_self_check` in its constructor."""

    def _init_self_check(self) -> None:
        # The window's .grad as its first pass left them: each optimizer parameter's .grad (None or
        # the tensor), the versions of those that are tensors, and the passes run since. Checked when
        # the window ends, before anything is applied: a .grad set to None or replaced, or one whose
        # version rose by more than one per pass since (autograd adds to an existing .grad in place,
        # one version each), was changed by something other than the Accumulator (a zero_grad() left
        # in the loop keeps only the window's last micro-batch), and stepping would apply a sum that
        # is no longer the window's. One read of the parameters' .grad per window beside the
        # window's own, none per micro-batch. Only where every pass writes into .grad and nothing else
        # does: one process, DDP and FSDP2 (see _synced_checks); None: nothing kept.
        # A driver whose window lives in .grad only part of the way says so itself (DeepSpeed: stages 0 and 1).
        in_grad = getattr(self._sync, "window_in_grad", self._sync.grads_in_params)
        self._checks = in_grad and (
            getattr(self._sync, "checks_across_ranks", False)
            or (self._sync.world_size == 1 and (getattr(self._sync, "accumulates_into_params", False)
                                                or getattr(self._sync, "window_in_grad", False))))
        # Several ranks: a synchronised pass rewrites .grad itself (DDP's all-reduce copies the averaged
        # bucket back, or makes .grad a view of it), so the window's .grad is checked before each such
        # pass and recorded again after it; a change found is not raised at once (the other ranks would
        # wait in the pass's collective) but rides the window's header all-reduce, and every rank refuses.
        self._synced_checks = self._checks and self._sync.world_size > 1
        # Versions a pass may add to each recorded .grad: None, one each; else one per .grad sharing its
        # version counter (DDP's gradient_as_bucket_view: every view of a bucket shares the bucket's).
        self._budget: Optional[list] = None
        self._wparams: Optional[List[torch.Tensor]] = None  # the optimizer's parameters, listed once per window
        self._seen: Optional[list] = None
        self._seen_versions: Optional[list] = None
        self._since = 0

    def _record(self) -> None:
        """Keep what is in .grad now (see ``_seen`` in ``_init_self_check``): one C loop over the parameters."""
        seen = self._seen = list(map(grad_of, self._wparams))
        present = list(filter(has_grad, seen))
        self._seen_versions = list(map(version_of, present))
        if self._synced_checks:
            self._budget = _shared_counters(present)
        self._since = 0

    def _touched(self) -> Optional[Tuple[int, str]]:
        """(position, what happened) of the first .grad that no pass since the record can have left; None when all can.

        A .grad that was None may have been made by a later pass; one that was a tensor stays that
        tensor, its version risen by at most its budget per pass (one, or the number of .grad sharing
        its version counter). A .grad replaced by a tensor of equal values, with no pass since and the
        old tensor unchanged, holds the same sum (DDP's first bucket rebuild does that in a forward):
        taken as it is, and recorded again.
        """
        seen, since, budget = self._seen, self._since, self._budget
        now = list(map(grad_of, self._wparams))
        if all(map(is_, now, seen)):
            rises = list(map(sub, map(version_of, filter(has_grad, seen)), self._seen_versions))
            if (max(rises, default=0) <= since if budget is None
                    else all(r <= since * b for r, b in zip(rises, budget))):
                return None
        versions = iter(self._seen_versions)
        budgets = iter(budget) if budget is not None else repeat(1)
        same = True
        for i, (g, before) in enumerate(zip(now, seen)):
            if before is None:
                continue
            version, allowed = next(versions), next(budgets) * since
            if g is None:
                return i, "was set to None"
            if g is not before:
                if since == 0 and before._version == version and _equal_values(g, before):
                    same = False
                    continue
                return i, "was replaced by another tensor"
            if g._version - version > allowed:
                return i, "was changed in place"
        if not same:
            self._record()
        return None

    def _check_untouched(self, where: str) -> None:
        """Raise (the window discarded, nothing applied) when a .grad of the window changed since its last pass."""
        found = self._touched()
        if found is None:
            return
        message = self._w.touched or self._touched_message(*found, where)  # the first finding (state_dict() may have)
        if self._sync.world_size > 1:
            # Raising here would leave the other ranks waiting in a collective: the window's header
            # all-reduce carries the finding and every rank refuses there (see _end_window).
            if self._w.touched is None:
                self._w.touched = message
            return
        self._drop_window()
        raise GradguardError(message)

    def _touched_message(self, i: int, what: str, where: str) -> str:
        p = self._wparams[i]
        # model= may be a sync object (DDPSync(ddp_model)): name the parameter from the module it wraps.
        module = self.model if isinstance(self.model, torch.nn.Module) else getattr(self.model, "model", None)
        name = next((n for n, q in module.named_parameters() if q is p), None) if isinstance(module, torch.nn.Module) else None
        label = f"{name!r} " if name else ""
        w = self._w
        first = w.losses[0][0] if w.losses else 0
        site = caller_site()
        return (
            f"the in-flight gradient of parameter {label}(shape {tuple(p.shape)}, position {i} in the optimizer's "
            f"param_groups) {what} after the backward() of micro-batch {first} of window {self.optimizer_steps} and before "
            f"acc.{where}{' at ' + site if site else ''}: something other than the Accumulator changed the window's "
            "gradients (an optimizer.zero_grad() or model.zero_grad() left in the loop, p.grad = None, an in-place edit "
            "such as p.grad.mul_(), or a backward() not made through acc.backward()), so the window's sum is no longer "
            "what its micro-batches added. Nothing was applied"
            + (f" on any of the {self._sync.world_size} ranks" if self._sync.world_size > 1 else "")
            + " and the window was discarded (skipped_windows + 1). "
            "The Accumulator clears the gradients itself after each step: remove the zero_grad() from the loop; clip with "
            "max_grad_norm=, and change a gradient in a hook that runs inside backward() (p.register_hook)"
        )

    def _touched_elsewhere_message(self) -> str:
        return (
            f"the in-flight gradients of window {self.optimizer_steps} were changed on another rank by something other "
            "than the Accumulator (an optimizer.zero_grad() or model.zero_grad() left in the loop, p.grad = None, an "
            "in-place edit of a gradient): that rank's error names the parameter. Nothing was applied on any of the "
            f"{self._sync.world_size} ranks and the window was discarded (skipped_windows + 1). The Accumulator clears "
            "the gradients itself after each step: remove the zero_grad() from the loop"
        )


def caller_site() -> Optional[str]:
    """``file:line`` of the first frame outside gradguard (the user's acc.backward() or acc.step()); on error paths only."""
    import os

    here = os.path.dirname(os.path.abspath(__file__)) + os.sep
    frame = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(here):
        frame = frame.f_back
    return f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else None


def _shared_counters(grads: List[torch.Tensor]) -> Optional[list]:
    """For each gradient, how many of ``grads`` share its version counter (views of one base); None when none do.

    An in-place write to any view of a base bumps the version every view reads (DDP's
    gradient_as_bucket_view makes each .grad a view of its bucket).
    """
    bases = [id(g._base) if g._base is not None else id(g) for g in grads]
    if len(set(bases)) == len(bases):
        return None
    counts: dict = {}
    for b in bases:
        counts[b] = counts.get(b, 0) + 1
    return [counts[b] for b in bases]


def _equal_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two dense gradients hold the same values (a replacement that changes no sum)."""
    return (a.shape == b.shape and a.dtype == b.dtype and a.device == b.device and not a.is_sparse
            and not b.is_sparse and bool(torch.equal(a, b)))
