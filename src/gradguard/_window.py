"""The Accumulator's window: the in-flight record, its saved form and the checks of a saved form.

The package-internal API:

* :class:`Window`: everything a window's end resets, in one record. Fields marked
  ``saved`` travel in ``Accumulator.state_dict()``; the rest are rebuilt on load.
* :data:`RUN_FIELDS`: the saved values that outlive a window (saved key -> the
  Accumulator attribute that holds it).
* :data:`KEYS`: every key of a saved state, derived once from the two above.
* :func:`save`: the saved form of a window (tensors and plain values only).
* :func:`load`: a saved form checked field by field, then invariant by invariant,
  against the loading Accumulator; returns ``(Window, run values, grads)`` or raises
  :class:`GradguardError` naming the first thing that cannot be right.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Callable, Dict, List, Optional, Tuple

import torch

from ._errors import GradguardError

__all__ = ["FORMAT", "Window", "RUN_FIELDS", "KEYS", "save", "load"]

FORMAT = "gradguard.Accumulator/1"
_FORMAT_PREFIX = "gradguard.Accumulator/"
_SAVED = {"saved": True}


@dataclass
class Window:
    """The in-flight window: everything a window's end resets, in one record."""

    micro: int = field(default=0, metadata=_SAVED)  # micro-batches ended (step() called)
    has_backward: bool = field(default=False, metadata=_SAVED)  # backward() done for the current micro-batch
    counted: Optional[bool] = field(default=None, metadata=_SAVED)  # whether this window's micro-batches pass counts
    ref: Optional[float] = field(default=None, metadata=_SAVED)  # the scale reference (see accumulate.py's docstring)
    total: float = field(default=0, metadata=_SAVED)  # items whose count is a Python number
    # Sum of per-item losses of micro-batches no longer listed in ``losses`` (saved before a load).
    loss_sum: Optional[torch.Tensor] = field(default=None, metadata=_SAVED)
    # Non-finite flag of micro-batches whose losses are no longer listed (saved before a load).
    bad: Optional[torch.Tensor] = field(default=None, metadata=_SAVED)
    # The end-of-window factor is in .grad: only a state saved by an earlier gradguard
    # (after a failed optimizer step) can say so; the window end now undoes it on failure.
    normalised: bool = field(default=False, metadata=_SAVED)
    # The first micro-batch (on this rank) whose loss reached none of the optimizer's parameters.
    unreached: Optional[int] = field(default=None, metadata=_SAVED)
    # (micro-batch, count tensor) of reduction="sum" micro-batches: read at the window's end.
    pending_counts: List[Tuple[int, torch.Tensor]] = field(default_factory=list)
    # (micro-batch, detached loss, its weight in items): summed once, at the window's end.
    losses: List[Tuple[int, torch.Tensor, float]] = field(default_factory=list)
    contributed: bool = False  # a backward of this window reached .grad
    # The optimizer parameters' .grad (with versions) before the window's first contribution:
    # [] when all were None; None until recorded. Tells a failed first pass how to undo
    # itself, and the window's end whether its losses reached the optimizer at all.
    start_grads: Optional[list] = None
    in_no_sync: bool = False  # inside microbatch() that defers gradient sync
    last_synced: bool = True  # did the last backward run with gradient sync?
    end_failed: Optional[str] = None  # the exception that interrupted (and undid) this window's end
    # The error message of the first change to .grad that this rank found behind the Accumulator's back
    # and has not raised yet (several ranks: refused on every rank at the window's end; a state saved
    # after the change: refused at the resumed window's end); None: none found.
    touched: Optional[str] = field(default=None, metadata=_SAVED)

    def loss_total(self) -> Optional[torch.Tensor]:
        """Sum of the window's per-item losses (float64, on the device), or None without a loss; no host read."""
        parts = [l.double() * alpha for _, l, alpha in self.losses]
        if self.loss_sum is not None:
            parts.append(self.loss_sum.double())
        if not parts:
            return None
        device = parts[0].device
        return parts[0] if len(parts) == 1 else torch.stack([t.to(device) for t in parts]).sum()

    def nonfinite_flag(self) -> Optional[torch.Tensor]:
        """Whether a loss of the window is NaN/Inf, as a device tensor (no host read); None without a loss."""
        flags = [~torch.isfinite(l) for _, l, _ in self.losses]
        if self.bad is not None:
            flags.append(self.bad)
        if not flags:
            return None
        device = flags[0].device
        return torch.stack([f.to(device) for f in flags]).any()

    @property
    def in_flight(self) -> bool:
        return self.micro > 0 or self.has_backward


#: Saved key -> the Accumulator attribute that keeps it between windows.
RUN_FIELDS: Dict[str, str] = {
    "optimizer_steps": "optimizer_steps",
    "skipped_windows": "skipped_windows",
    "last_loss": "_last_loss",
    "ref_hint": "_ref_hint",
    "hint_counted": "_hint_counted",
}
WINDOW_FIELDS: Tuple[str, ...] = tuple(f.name for f in fields(Window) if f.metadata.get("saved"))
KEYS: Tuple[str, ...] = ("format", "steps", *WINDOW_FIELDS, *RUN_FIELDS, "grads")


def save(w: Window, steps: int, run: Dict[str, object], grads: List[Optional[torch.Tensor]]) -> dict:
    """The saved form of ``w``: its fields, with counts still on the device read and folded in.

    A checkpoint is no hot path: the pending counts are read here, and the
    non-finite flag of the listed losses is carried (as a device tensor), so a
    resumed window ends as the uninterrupted one would.
    """
    state = {"format": FORMAT, "steps": steps}
    state.update((name, getattr(w, name)) for name in WINDOW_FIELDS)
    state["loss_sum"], state["bad"] = w.loss_total(), w.nonfinite_flag()
    if w.pending_counts:
        values = torch.stack([c.double() for _, c in w.pending_counts]).tolist()
        if all(math.isfinite(v) and v >= 0 for v in values):
            state["total"] = w.total + sum(values)
        else:
            state["bad"] = torch.ones((), dtype=torch.bool)  # the resumed window ends dropped, as this one would
    state.update(run)
    state["grads"] = grads
    return state


# ------------------------------------------------------------------ checks
def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    # int or float only: a Fraction would reach torch arithmetic and fail there.
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _positive(v) -> bool:
    return _is_number(v) and math.isfinite(v) and v > 0


def _scalar_tensor(v, dtype_ok: Callable[[torch.Tensor], bool]) -> bool:
    return isinstance(v, torch.Tensor) and v.dim() == 0 and not v.is_meta and dtype_ok(v)


def _floating(t: torch.Tensor) -> bool:
    return t.is_floating_point()


def _boolean(t: torch.Tensor) -> bool:
    return t.dtype == torch.bool


# One check per field, independent of the others: (test, what the value must be).
_FIELD_CHECKS: Dict[str, Tuple[Callable[[object], bool], str]] = {
    "steps": (_is_int, "an int"),
    "micro": (lambda v: _is_int(v) and v >= 0, "an int >= 0"),
    "has_backward": (lambda v: isinstance(v, bool), "True or False"),
    "counted": (lambda v: v is None or v is True or v is False, "None, True or False"),
    "ref": (lambda v: v is None or _positive(v), "None or a finite int or float > 0"),
    "total": (lambda v: _is_number(v) and math.isfinite(v) and v >= 0, "a finite int or float >= 0"),
    "loss_sum": (lambda v: v is None or _scalar_tensor(v, _floating), "None or a 0-dim floating tensor with a value (not on the meta device)"),
    "bad": (lambda v: v is None or _scalar_tensor(v, _boolean), "None or a 0-dim bool tensor with a value (not on the meta device)"),
    "normalised": (lambda v: isinstance(v, bool), "True or False"),
    "unreached": (lambda v: v is None or (_is_int(v) and v >= 0), "None or an int >= 0"),
    "touched": (lambda v: v is None or (isinstance(v, str) and v != ""), "None or the message of a change found"),
    "optimizer_steps": (lambda v: _is_int(v) and v >= 0, "an int >= 0"),
    "skipped_windows": (lambda v: _is_int(v) and v >= 0, "an int >= 0"),
    "last_loss": (lambda v: v is None or _is_number(v) or _scalar_tensor(v, _floating),
                  "None, an int or float, or a 0-dim floating tensor with a value (not on the meta device)"),
    "ref_hint": (lambda v: v is None or _positive(v), "None or a finite int or float > 0"),
    "hint_counted": (lambda v: v is None or v is True or v is False, "None, True or False"),
    "grads": (lambda v: isinstance(v, (list, tuple)), "a list"),
}


def _damaged(sd: dict, key: str, want: str) -> GradguardError:
    return GradguardError(
        f"the Accumulator state's {key} is {sd[key]!r}, but it must be {want}: "
        "the state is damaged or was not made by acc.state_dict()"
    )


def _check_format(sd) -> None:
    if isinstance(sd, dict) and sd.get("format") == FORMAT:
        return
    fmt = sd.get("format") if isinstance(sd, dict) else None
    if isinstance(fmt, str) and fmt.startswith(_FORMAT_PREFIX):
        raise GradguardError(
            f"the Accumulator state has format {fmt!r}, which this gradguard does not read (it reads {FORMAT!r}): "
            "it was saved by another gradguard version; load it with the version that saved it, or upgrade gradguard"
        )
    raise GradguardError(
        f"not a gradguard Accumulator state (format {fmt if isinstance(sd, dict) else type(sd).__name__!r}, "
        f"expected {FORMAT!r}): pass the dict returned by acc.state_dict()"
    )


# Keys a state saved by an earlier gradguard of the same format may lack, with the value they mean.
_DEFAULTS = {"unreached": None, "touched": None}


def _check_keys(sd: dict) -> None:
    missing = [k for k in KEYS if k not in sd and k not in _DEFAULTS]
    if missing:
        raise GradguardError(f"the Accumulator state is missing {', '.join(map(repr, missing))}: it was not made by acc.state_dict()")
    extra = sorted(set(sd) - set(KEYS), key=repr)
    if extra:
        raise GradguardError(f"the Accumulator state has unknown keys {', '.join(map(repr, extra))}: it was not made by acc.state_dict()")


def _check_fields(sd: dict, steps: int) -> None:
    for key, (ok, want) in _FIELD_CHECKS.items():
        if not ok(sd[key]):
            raise _damaged(sd, key, want)
    if sd["steps"] != steps:
        raise GradguardError(
            f"the state was saved with steps={sd['steps']} but this Accumulator has steps={steps}: "
            "resume with the same number of micro-batches per step"
        )


# Invariants between fields: each returns (key to blame, what it must be) when broken, else None.
def _micro_in_window(sd: dict, steps: int):
    if sd["micro"] > steps or (sd["micro"] == steps and sd["has_backward"]):
        return "micro", f"an int from 0 to {steps - 1} (steps - 1)"
    return None


def _counted_iff_in_flight(sd: dict, steps: int):
    if (sd["counted"] is None) == _in_flight(sd):
        return "counted", "True or False in a window with micro-batches, None otherwise"
    return None


def _uncounted_total(sd: dict, steps: int):
    micro_batches = sd["micro"] + sd["has_backward"]
    if sd["counted"] is False and sd["total"] != micro_batches:
        return "total", f"{micro_batches} (one per uncounted micro-batch)"
    return None


def _empty_outside_a_window(sd: dict, steps: int):
    if _in_flight(sd):
        return None
    if sd["total"] != 0:
        return "total", "0 outside a window"
    for key in ("loss_sum", "bad", "unreached", "touched"):
        if sd[key] is not None:
            return key, "None outside a window"
    return None


def _hint_pairs(sd: dict, steps: int):
    if (sd["ref_hint"] is None) != (sd["hint_counted"] is None):
        return "hint_counted", "True or False with a ref_hint, None without"
    return None


def _normalised_only_after_an_end(sd: dict, steps: int):
    if sd["normalised"] and (sd["micro"] == 0 or sd["has_backward"]):
        return "normalised", "True only for an ended window whose step failed"
    return None


def _loss_implies_scale(sd: dict, steps: int):
    # A loss was back-propagated only after the window's scale reference was set.
    if sd["loss_sum"] is not None and sd["ref"] is None:
        return "ref", "a number > 0 when the window holds a loss (loss_sum is set)"
    return None


def _items_imply_loss(sd: dict, steps: int):
    # Every micro-batch with items back-propagated its loss, which the loss sum records.
    if sd["total"] > 0 and sd["loss_sum"] is None:
        return "loss_sum", f"a 0-dim tensor when the window holds {sd['total']!r} items"
    return None


def _unreached_in_window(sd: dict, steps: int):
    if sd["unreached"] is not None and sd["unreached"] >= sd["micro"] + sd["has_backward"]:
        return "unreached", f"None or the index of one of the window's {sd['micro'] + sd['has_backward']} micro-batches"
    return None


_INVARIANTS = (_micro_in_window, _counted_iff_in_flight, _uncounted_total, _empty_outside_a_window,
               _hint_pairs, _normalised_only_after_an_end, _loss_implies_scale, _items_imply_loss, _unreached_in_window)


def _in_flight(sd: dict) -> bool:
    return sd["micro"] > 0 or sd["has_backward"]


def _poisoned(sd: dict) -> bool:
    """A window with a non-finite loss legitimately holds NaN gradients (it ends dropped)."""
    return (sd["bad"] is not None and bool(sd["bad"])) or (sd["loss_sum"] is not None and not bool(torch.isfinite(sd["loss_sum"])))


def _check_grad(i: int, g, p: torch.Tensor, poisoned: bool) -> None:
    if not isinstance(g, torch.Tensor):
        raise GradguardError(f"in-flight gradient {i} is a {type(g).__name__}, not a tensor: the state is damaged")
    if tuple(g.shape) != tuple(p.shape):
        raise GradguardError(
            f"in-flight gradient {i} has shape {tuple(g.shape)} but parameter {i} has shape {tuple(p.shape)}: "
            "the state belongs to a different model"
        )
    if g.is_complex() != p.is_complex() or not (g.is_floating_point() or g.is_complex()):
        raise GradguardError(f"in-flight gradient {i} has dtype {g.dtype} but parameter {i} has {p.dtype}: the state belongs to a different model")
    if g.is_meta:
        raise GradguardError(f"in-flight gradient {i} is a meta tensor (no values): the state is damaged")
    values = g.coalesce().values() if g.is_sparse else g
    if not poisoned and not bool(torch.isfinite(values).all()):
        raise GradguardError(f"in-flight gradient {i} holds NaN or Inf although the window's losses are finite: the state is damaged")


def _check_grads(sd: dict, params: List[torch.Tensor], single_process: bool) -> None:
    grads, in_flight = sd["grads"], _in_flight(sd)
    if in_flight and len(grads) != len(params) or not in_flight and grads:
        raise GradguardError(
            f"the state holds gradients for {len(grads)} parameters but "
            + (f"the optimizer has {len(params)}: load it into an Accumulator over the same optimizer (same parameter groups, same order)"
               if in_flight else "no window was in flight: it was not made by acc.state_dict()")
        )
    poisoned = _poisoned(sd)
    for i, (p, g) in enumerate(zip(params, grads)):
        if g is not None:
            _check_grad(i, g, p, poisoned)
    if not in_flight:
        return
    # Invariants between the gradients and the counts: items were back-propagated exactly
    # when some gradient holds something.
    if sd["total"] > 0 and all(g is None for g in grads):
        raise GradguardError(
            f"the Accumulator state's total is {sd['total']!r} items but it holds no in-flight gradient (grads are all "
            "None): the items' gradients are missing, so the resumed window would be off; the state is damaged or "
            "was not made by acc.state_dict()"
        )
    if single_process and sd["total"] == 0 and any(g is not None and bool((g.coalesce().values() if g.is_sparse else g).any()) for g in grads):
        raise GradguardError(
            f"the Accumulator state's total is 0 items (ref {sd['ref']!r}) but it holds non-zero in-flight gradients: "
            "the gradients would be dropped or normalised by a wrong total; the state is damaged or was not made by acc.state_dict()"
        )


def load(sd, steps: int, params: List[torch.Tensor], *, single_process: bool = True
         ) -> Tuple[Window, Dict[str, object], Optional[list]]:
    """Check a saved state against ``steps`` and ``params``; returns (window, run values, grads or None).

    ``single_process``: the state is loaded on one process, where a window
    without items cannot hold non-zero gradients (under DDP a rank with no
    items holds the other ranks' reduced gradients after a synced backward).

    Raises GradguardError naming the first field that cannot be right.
    """
    _check_format(sd)
    _check_keys(sd)
    sd = {**_DEFAULTS, **sd}
    _check_fields(sd, steps)
    for invariant in _INVARIANTS:
        broken = invariant(sd, steps)
        if broken is not None:
            raise _damaged(sd, *broken)
    _check_grads(sd, params, single_process)
    window = Window(**{name: sd[name] for name in WINDOW_FIELDS})
    run = {key: sd[key] for key in RUN_FIELDS}
    return window, run, list(sd["grads"]) if window.in_flight else None
