"""What the watch installs into torch, once for all watches, and how events reach them.

Installed while at least one watch is active, all removed when the last one
exits (in whatever order the watches exit):

* PyTorch's global optimizer step pre/post hooks (every optimizer, whenever it
  was built) and, while some watch wants it, its global module forward hook;
* thin wrappers around ``torch.autograd.backward`` (which ``Tensor.backward``
  calls), ``Optimizer.zero_grad`` / ``Module.zero_grad``,
  ``torch.amp.GradScaler.scale`` and ``unscale_``, and the clipping functions
  (``torch.nn.utils.clip_grad``'s ``_get_total_norm``, which ``clip_grad_norm_``
  looks up at each call however the user imported it, and ``clip_grad_value_``
  and ``get_total_norm`` where ``torch.nn.utils`` exports them). PyTorch has no
  public hook that sees the root of a backward pass, a ``zero_grad`` call, a
  loss scaled for AMP or a clip; the wrappers cost one Python call per
  backward pass, clearing, scaling or clip.

A watch belongs to the thread that entered it: an event reaches only the
watches of the thread it happens on. Two threads training their own models,
each under its own watch, never see (or touch) each other's parameters;
reading another thread's ``.grad`` while its backward pass writes it is a data
race inside torch.

Each session (see ``_session``) offers ``backward(call, tensors, args, kwargs)``,
``zero_grad(call, owner, args, kwargs, module)``, ``step_pre(opt, args, kwargs)``,
``step_post(opt, args, kwargs)``, ``forward(module)``, ``scaled(out, scaler)``,
``unscaled(optimizer)``, ``clipping(name, tensors, grads)``, ``clipped(params)`` (after a clip that rescaled in place) and a ``wants_forward`` flag; ``call`` runs the next session's handler, the last one
the original function.
"""

from __future__ import annotations

import math
import sys
import threading
from typing import Dict, List, Tuple

import torch

_lock = threading.RLock()
# thread id -> the sessions active on that thread, outermost first. Replaced, never
# mutated, so that the wrappers read it without the lock.
_by_thread: Dict[int, Tuple[object, ...]] = {}
_get_ident = threading.get_ident
_installed: List[object] = []  # the global hook handles
_fwd = None  # the global forward hook's handle, while some session wants it


class _Patch:
    """``owner.name`` replaced by a wrapper that dispatches to the thread's sessions.

    Made once per process and reused: if other code wrapped the attribute after
    us, removing would drop its wrapper, so ours stays in place, forwarding only,
    and is switched back on (not wrapped again) by the next watch.
    """

    def __init__(self, owner, name: str, make):
        self.owner, self.name = owner, name
        self.orig = owner.__dict__[name]
        self.on = False
        self.wrapper = make(self)
        self.wrapper.__wrapped__ = self.orig
        self.wrapper.__doc__ = self.orig.__doc__

    def apply(self) -> None:
        self.on = True
        if self.owner.__dict__.get(self.name) is not self.wrapper and not self._buried():
            self.orig = self.wrapper.__wrapped__ = self.owner.__dict__[self.name]
            setattr(self.owner, self.name, self.wrapper)

    def _buried(self) -> bool:
        """Our wrapper is still somewhere under another one (someone wrapped it after us)."""
        fn = self.owner.__dict__.get(self.name)
        for _ in range(32):
            fn = getattr(fn, "__wrapped__", None)
            if fn is None:
                return False
            if fn is self.wrapper:
                return True
        return False

    def remove(self) -> None:
        self.on = False
        if self.owner.__dict__.get(self.name) is self.wrapper:
            setattr(self.owner, self.name, self.orig)


def _make_backward(patch: "_Patch"):
    def backward(tensors, *args, **kwargs):
        orig = patch.orig
        sessions = _by_thread.get(_get_ident()) if patch.on else None
        if not sessions:
            return orig(tensors, *args, **kwargs)
        call = orig
        for s in reversed(sessions[1:]):  # nested watches on this thread: the outermost sees the call first
            call = (lambda s, nxt: (lambda t, *a, **k: s.backward(nxt, t, a, k)))(s, call)
        return sessions[0].backward(call, tensors, args, kwargs)

    return backward


def _make_zero_grad(module: bool):
    def make(patch: "_Patch"):
        def zero_grad(owner, *args, **kwargs):
            orig = patch.orig
            sessions = _by_thread.get(_get_ident()) if patch.on else None
            if not sessions:
                return orig(owner, *args, **kwargs)
            call = orig
            for s in reversed(sessions[1:]):
                call = (lambda s, nxt: (lambda o, *a, **k: s.zero_grad(nxt, o, a, k, module)))(s, call)
            return sessions[0].zero_grad(call, owner, args, kwargs, module)

        return zero_grad

    return make


def _make_scale(patch: "_Patch"):
    def scale(scaler, outputs):
        out = patch.orig(scaler, outputs)
        sessions = _by_thread.get(_get_ident()) if patch.on else None
        if sessions and out is not outputs and isinstance(out, torch.Tensor):
            for s in sessions:
                s.scaled(out, scaler)
        return out

    return scale


def _make_unscale(patch: "_Patch"):
    def unscale_(scaler, optimizer):
        out = patch.orig(scaler, optimizer)  # raises (unscaled twice) before anything is noted
        sessions = _by_thread.get(_get_ident()) if patch.on else None
        if sessions:
            for s in sessions:
                s.unscaled(optimizer)
        return out

    return unscale_


def _unbounded(threshold) -> bool:
    """A clip threshold that clips nothing (``clip_grad_norm_(ps, float("inf"))`` reads the norm for a log)."""
    if isinstance(threshold, torch.Tensor):
        return False  # reading it would wait for the device; a tensor threshold is taken for a real clip
    try:
        return math.isinf(float(threshold)) and float(threshold) > 0
    except (TypeError, ValueError, RuntimeError):
        return False  # a tensor of several values, or something torch will refuse itself


def _make_clip(grads: bool):
    """A clipping function's wrapper; ``grads``: its first argument is gradients (``_get_total_norm``),
    else parameters. The sessions are told before it runs, so that "raise" stops the clip."""

    def make(patch: "_Patch"):
        def clip(tensors, *args, **kwargs):
            orig = patch.orig
            sessions = _by_thread.get(_get_ident()) if patch.on else None
            if sessions:
                if not isinstance(tensors, torch.Tensor):
                    tensors = list(tensors)  # a generator: read once here, handed on as a list
                name = orig.__name__.lstrip("_")
                if sys._getframe(1).f_code.co_name == "clip_grad_norm_":
                    name = "clip_grad_norm_"  # the norm clip_grad_norm_ reads, and the clip it makes with it
                if not grads and args and _unbounded(args[0]):
                    name = "get_total_norm"  # an infinite threshold clips nothing: only the norm is read
                for s in sessions:
                    s.clipping(name, tensors, grads)
            out = orig(tensors, *args, **kwargs)
            if sessions and not grads:
                for s in sessions:
                    s.clipped(tensors)
            return out

        return clip

    return make


_PATCHES: List[_Patch] = []


def _make_register_hook(patch: "_Patch"):
    def register_hook(tensor, hook):
        sessions = _by_thread.get(_get_ident()) if patch.on else None
        if not sessions or not callable(hook):
            return patch.orig(tensor, hook)

        def watched(grad):
            out = hook(grad)
            if out is not None and out is not grad:
                # the hook replaced a gradient inside the pass (``lambda g: g / k`` on an activation): the
                # pass's weight is no longer the factor its loss's graph shows
                for s in sessions:
                    s.gradient_replaced()
            return out

        watched.__wrapped__ = hook
        return patch.orig(tensor, watched)

    return register_hook


def _patches() -> List[_Patch]:
    if not _PATCHES:
        _PATCHES.extend([
            _Patch(torch.autograd, "backward", _make_backward),
            _Patch(torch.optim.Optimizer, "zero_grad", _make_zero_grad(False)),
            _Patch(torch.nn.Module, "zero_grad", _make_zero_grad(True)),
            _Patch(torch.amp.GradScaler, "scale", _make_scale),
            _Patch(torch.amp.GradScaler, "unscale_", _make_unscale),
            _Patch(torch.Tensor, "register_hook", _make_register_hook),
        ])
        from torch.nn import utils
        from torch.nn.utils import clip_grad

        for owner, name, grads in ((clip_grad, "_get_total_norm", True), (clip_grad, "clip_grad_value_", False),
                                   (utils, "clip_grad_value_", False), (utils, "get_total_norm", True),
                                   # the clip given a norm (clip_grad_norm_'s second half; Accelerate calls it alone)
                                   (clip_grad, "_clip_grads_with_norm_", False), (utils, "clip_grads_with_norm_", False)):
            if callable(owner.__dict__.get(name)):  # (as this torch version names them)
                _PATCHES.append(_Patch(owner, name, _make_clip(grads)))
    return _PATCHES


def stock_zero_grad(owner, module: bool) -> bool:
    """``owner.zero_grad`` is torch's own ``Optimizer.zero_grad`` (``Module.zero_grad`` for a module) under
    our wrapper, nothing overriding or wrapping it: with ``set_to_none=True`` it leaves every ``.grad`` of
    the optimizer's (the module's) parameters None."""
    patch = _PATCHES[2 if module else 1] if len(_PATCHES) > 2 else None
    where, name = ("torch.nn.modules.module", "Module.zero_grad") if module else ("torch.optim.optimizer", "Optimizer.zero_grad")
    return (patch is not None and patch.on and type(owner).zero_grad is patch.wrapper
            and getattr(patch.orig, "__module__", None) == where and getattr(patch.orig, "__qualname__", None) == name)


def _on_step_pre(opt, args, kwargs):
    sessions = _by_thread.get(_get_ident())
    if sessions:
        for s in sessions:
            s.step_pre(opt, args, kwargs)


def _on_step_post(opt, args, kwargs):
    sessions = _by_thread.get(_get_ident())
    if sessions:
        for s in sessions:
            s.step_post(opt, args, kwargs)


def _on_forward(module, args, output):
    sessions = _by_thread.get(_get_ident())
    if sessions:
        for s in sessions:
            if s.wants_forward:
                s.forward(module)


def add(session) -> None:
    """Start sending this thread's events to ``session`` (installing what the first watch needs)."""
    from torch.optim import optimizer as optim_module

    with _lock:
        first = not _installed
        if first:
            try:
                _installed.append(optim_module.register_optimizer_step_pre_hook(_on_step_pre))
                _installed.append(optim_module.register_optimizer_step_post_hook(_on_step_post))
                for patch in _patches():
                    patch.apply()
            except BaseException:
                _uninstall()
                raise
        tid = _get_ident()
        _by_thread[tid] = _by_thread.get(tid, ()) + (session,)
        update_forward_hook()


def discard(session) -> None:
    """Stop sending events to ``session``; the last one out removes everything."""
    with _lock:
        for tid, sessions in list(_by_thread.items()):
            if session in sessions:
                rest = tuple(s for s in sessions if s is not session)
                if rest:
                    _by_thread[tid] = rest
                else:
                    del _by_thread[tid]
        if not _by_thread:
            _uninstall()
        else:
            update_forward_hook()


def update_forward_hook() -> None:
    """Register the global forward hook while some session wants it, remove it otherwise.

    It moves every module call onto nn.Module's slow path, so sessions only
    want it now and then (see ``Session.forward``).
    """
    global _fwd
    from torch.nn.modules import module as nn_module

    with _lock:
        want = any(s.wants_forward for sessions in _by_thread.values() for s in sessions)
        if want and _fwd is None:
            _fwd = nn_module.register_module_forward_hook(_on_forward)
        elif not want and _fwd is not None:
            _fwd.remove()
            _fwd = None


def _uninstall() -> None:
    global _fwd
    for h in _installed:
        h.remove()
    _installed.clear()
    if _fwd is not None:
        _fwd.remove()
        _fwd = None
    for patch in reversed(_PATCHES):
        patch.remove()


def active() -> bool:
    """Whether any watch is active on any thread."""
    return bool(_by_thread)
