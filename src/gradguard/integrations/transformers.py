"""Is an HF ``Trainer``'s accumulated gradient the full-batch one? And the watch during ``train()``.

The Trainer is exact when it can pass ``num_items_in_batch`` (the window's
count of target tokens) to a loss that divides its token sum by it. It is
not when the model's ``forward`` takes no ``**kwargs`` (it then averages the
micro-batch means), when a ``compute_loss`` override accepts
``num_items_in_batch`` but returns a per-micro-batch mean (a gradient K times
too large), or when the Trainer counts other items than the loss averages
over (a causal LM whose ``loss_type`` is unset: every non-ignored label is
counted, though the loss shifts labels and never targets position 0).
:func:`check_trainer` measures which case a given trainer is in, on its own
data and through its own ``training_step``.
"""

from __future__ import annotations

import copy
import random
import sys
from typing import List, Optional

from . import require

require("transformers", "transformers")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from transformers import Trainer, TrainerCallback  # noqa: E402

from .._errors import GradguardError
from ._watch import FrameworkWatch, loss_line

__all__ = ["check_trainer", "TrainerCheck", "Watch"]

IGNORE = -100


class TrainerCheck:
    """What :func:`check_trainer` found.

    Attributes:
        equivalent: True when the trainer's accumulated gradient matches the
            full-batch gradient of the same items (within ``rtol``).
        max_rel_diff: ``max|g - g_ref| / max|g_ref|``, both maxima over every gradient entry of the model.
        causes: one sentence per cause of a difference, each with its fix (empty when equivalent).
        micro_batches: micro-batches in the window checked.
        items: target tokens (items) per micro-batch, as the loss averages them.
        num_items_in_batch: what the Trainer passed as ``num_items_in_batch`` (None: nothing).
        dropout_off: dropout modules or rates switched off for the comparison (dropout makes
            every split of a batch differ, so it cannot be compared with it on).
    """

    def __init__(self, equivalent, max_rel_diff, causes, micro_batches, items, num_items_in_batch, dropout_off):
        self.equivalent = equivalent
        self.max_rel_diff = max_rel_diff
        self.causes: List[str] = causes
        self.micro_batches = micro_batches
        self.items = items
        self.num_items_in_batch = num_items_in_batch
        self.dropout_off = dropout_off

    def __repr__(self) -> str:
        return (f"TrainerCheck(equivalent={self.equivalent}, max_rel_diff={self.max_rel_diff:.3g}, "
                f"causes={len(self.causes)}, items={self.items})")

    def __str__(self) -> str:
        head = ("equivalent: the accumulated gradient is the full-batch one" if self.equivalent
                else "NOT equivalent: the accumulated gradient differs from the full-batch one")
        lines = [f"{head} (max relative difference {self.max_rel_diff:.3g}; {self.micro_batches} micro-batches "
                 f"with {self.items} items; num_items_in_batch={self.num_items_in_batch})"]
        lines += [f"- {c}" for c in self.causes]
        if self.dropout_off:
            lines.append(f"(dropout switched off for the comparison: {', '.join(self.dropout_off[:5])}"
                         f"{', ...' if len(self.dropout_off) > 5 else ''})")
        return "\n".join(lines)


def check_trainer(trainer: Trainer, *, rtol: Optional[float] = None) -> TrainerCheck:
    """Run one accumulation window of ``trainer`` and compare it with the full-batch gradient.

    Takes the first ``gradient_accumulation_steps`` micro-batches of the
    trainer's train dataloader (``get_batch_samples``, as ``train()`` does) and
    runs each through the trainer's own ``training_step`` (so its
    ``compute_loss``, loss scaling and ``num_items_in_batch`` are used). The
    gradient that accumulates is compared with the float64 gradient of the
    mean loss over all target tokens (non-ignored labels, shifted when the
    model's loss shifts them) of the same items. Dropout is switched off for
    both. Afterwards the model's parameters, buffers and gradients, the
    optimizer and the random-number generators are as they were.

    Args:
        trainer: a ``transformers.Trainer`` with a ``train_dataset``, in one process.
        rtol: the relative difference still called equivalent (default: 1e-4
            for float32 models, 2e-2 for 16-bit ones).

    Returns:
        a :class:`TrainerCheck` (``.equivalent``, ``.max_rel_diff``, ``.causes``).

    Raises:
        GradguardError: no train dataset, several processes, or batches without ``labels``.

    >>> report = check_trainer(trainer)            # doctest: +SKIP
    >>> report.equivalent, report.causes           # doctest: +SKIP
    (False, ["the model's forward takes no **kwargs ..."])
    """
    if not isinstance(trainer, Trainer):
        raise GradguardError(f"check_trainer needs a transformers.Trainer, got {type(trainer).__name__}")
    if trainer.train_dataset is None:
        raise GradguardError(
            "the trainer has no train_dataset, so there is no accumulation window to check: "
            "build it with Trainer(..., train_dataset=...) (check_trainer reads the trainer's own train dataloader)"
        )
    if trainer.args.world_size > 1:
        raise GradguardError(
            f"check_trainer compares one process's window with its full batch; this run has world_size="
            f"{trainer.args.world_size}: run the check in a single process"
        )
    model = trainer.model
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if rtol is None:
        rtol = 2e-2 if any(p.dtype in (torch.float16, torch.bfloat16) for _, p in params) else 1e-4

    with _restored(trainer, model) as saved:
        dropout_off = _dropout_off(model, saved)
        k = trainer.args.gradient_accumulation_steps
        iterator = iter(trainer.get_train_dataloader())
        batches, num_items = trainer.get_batch_samples(iterator, k, trainer.args.device)
        if not batches:
            raise GradguardError("the trainer's train dataloader yielded no batch: is train_dataset empty?")
        if any("labels" not in b for b in batches):
            raise GradguardError("check_trainer needs batches with 'labels' (the targets the loss averages over)")
        trainer.current_gradient_accumulation_steps = len(batches)  # what train() sets for each window
        model.zero_grad(set_to_none=True)
        for b in batches:
            trainer.training_step(model, b, num_items)
        got = [p.grad.detach().double() if p.grad is not None else torch.zeros_like(p, dtype=torch.float64)
               for _, p in params]
        scale_free = _ignores_num_items(trainer, model, batches[0], num_items)
        want, items, shifted = _reference(model, [n for n, _ in params], [trainer._prepare_inputs(b) for b in batches])

    # Relative to the largest gradient entry of the whole model (a per-parameter ratio would
    # magnify float32 rounding in parameters whose gradient is nearly zero).
    scale = max(float(w.abs().max()) for w in want) or 1.0
    diff = max(float((g - w).abs().max()) for g, w in zip(got, want)) / scale
    equivalent = diff <= rtol
    n_items = int(num_items) if num_items is not None else None
    causes = [] if equivalent else _causes(trainer, items, n_items, shifted, scale_free, len(batches), k)
    return TrainerCheck(equivalent, diff, causes, len(batches), items, n_items, dropout_off)


# ---------------------------------------------------------------- reference
def _reference(model, names, batches):
    """float64 gradient of the token-mean loss over all micro-batches' targets; per-micro-batch items; shifted?"""
    ref = copy.deepcopy(model).double()
    ref.zero_grad(set_to_none=True)
    sums, counts, shifted = [], [], None
    for b in batches:
        labels = b["labels"]
        out = ref(**{key: v for key, v in b.items() if key != "labels"})
        logits = out["logits"] if isinstance(out, dict) or hasattr(out, "keys") else out[0]
        if shifted is None:
            shifted = _loss_shifts(ref, b, logits, labels)
        lg, lb = (logits[..., :-1, :], labels[..., 1:]) if shifted else (logits, labels)
        sums.append(F.cross_entropy(lg.reshape(-1, lg.shape[-1]), lb.reshape(-1), ignore_index=IGNORE, reduction="sum"))
        counts.append(int((lb != IGNORE).sum()))
    total = sum(sums) / max(sum(counts), 1)
    total.backward()
    grads = dict(ref.named_parameters())
    want = [grads[n].grad.detach() if grads[n].grad is not None else torch.zeros_like(grads[n]) for n in names]
    return want, counts, bool(shifted)


def _loss_shifts(ref, batch, logits, labels) -> bool:
    """Whether the model's own loss targets ``labels[..., 1:]`` from ``logits[..., :-1]`` (a causal LM)."""
    with torch.no_grad():
        own = ref(**batch)
        own = own["loss"] if hasattr(own, "keys") else own[0]
        if own is None or labels.dim() < 2:
            return False
        v = logits.shape[-1]
        shifted = F.cross_entropy(logits[..., :-1, :].reshape(-1, v), labels[..., 1:].reshape(-1), ignore_index=IGNORE)
        plain = F.cross_entropy(logits.reshape(-1, v), labels.reshape(-1), ignore_index=IGNORE)
        # The closer of the two (a model's loss may upcast its logits to float32 only).
        return bool((own - shifted).abs() < (own - plain).abs())


def _ignores_num_items(trainer, model, batch, num_items) -> bool:
    """Whether ``compute_loss`` returns the same loss for two different ``num_items_in_batch`` (it ignores it)."""
    if num_items is None:
        return False
    inputs = trainer._prepare_inputs(batch)
    with torch.no_grad():
        a = trainer.compute_loss(model, inputs, num_items_in_batch=num_items)
        b = trainer.compute_loss(model, inputs, num_items_in_batch=num_items * 2)
    return bool(torch.equal(a.detach(), b.detach()))


def _causes(trainer, items, num_items, shifted, scale_free, micro, k) -> List[str]:
    out = []
    overridden = type(trainer).compute_loss is not Trainer.compute_loss
    scaled = trainer.loss_is_scaled_for_ga
    if scaled is None:
        scaled = (trainer.model_accepts_loss_kwargs and num_items is not None) or trainer.compute_loss_func is not None
    if num_items is None and not trainer.model_accepts_loss_kwargs and trainer.compute_loss_func is None:
        out.append(
            f"the model's forward takes no **kwargs, so the Trainer cannot pass num_items_in_batch and averages the "
            f"{micro} micro-batch means with equal weights although they average over {items} items (a mean of means). "
            "Fix: give forward a **kwargs (num_items_in_batch) and return the summed loss divided by it, or pass "
            "Trainer(compute_loss_func=...) that divides the token sum by num_items_in_batch"
        )
    elif scale_free and scaled:
        out.append(
            f"{type(trainer).__name__}.compute_loss ignores num_items_in_batch and returns each micro-batch's mean, but "
            f"the Trainer takes the loss as already scaled and does not divide it by {micro}: the gradient is about "
            f"{micro} times too large. Fix: return the loss summed over tokens divided by num_items_in_batch, or set "
            "loss_is_scaled_for_ga = False on the Trainer subclass"
        )
    elif num_items is not None and num_items != sum(items):
        why = (" (the model's loss shifts labels, so position 0 of each row is never a target, but its loss_type is "
               "unset and the Trainer counts every non-ignored label)") if shifted else ""
        fix = ("set model.loss_type = 'ForCausalLM' before building the Trainer, or label position 0 of every row -100"
               if shifted else "make the count and the loss use the same targets")
        out.append(
            f"the Trainer counted num_items_in_batch={num_items} but the loss averages over {sum(items)} target tokens"
            f"{why}: every gradient is scaled by {sum(items)}/{num_items}. Fix: {fix}"
        )
    if micro < k:
        out.append(f"the window checked is a partial one ({micro} of {k} micro-batches): the train dataset has fewer "
                   f"than {k} batches")
    if not out:
        out.append("no known cause matched: the loss or its scaling differs from a token mean over the labels "
                   "(a compute_loss with another reduction, label smoothing, or a model-specific loss)")
    return out


# ------------------------------------------------------------ state & dropout
class _restored:
    """Put back parameters, buffers, gradients, RNG states and trainer attributes on exit."""

    def __init__(self, trainer, model):
        self.trainer, self.model = trainer, model

    def __enter__(self):
        m = self.model
        self.tensors = [(t, t.detach().clone()) for t in list(m.parameters()) + list(m.buffers())]
        self.grads = [(p, p.grad) for p in m.parameters()]
        self.training = m.training
        self.rng = (torch.get_rng_state(), random.getstate(),
                    torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None)
        try:
            import numpy

            self.np_rng = numpy.random.get_state()
        except ImportError:  # pragma: no cover - numpy comes with transformers
            self.np_rng = None
        self.cgas = self.trainer.__dict__.get("current_gradient_accumulation_steps", _MISSING)
        self.dropout = []
        return self

    def __exit__(self, *exc):
        with torch.no_grad():
            for t, saved in self.tensors:
                t.copy_(saved)
        for p, g in self.grads:
            p.grad = g
        self.model.train(self.training)
        for obj, attr, value in self.dropout:
            setattr(obj, attr, value)
        torch.set_rng_state(self.rng[0])
        random.setstate(self.rng[1])
        if self.rng[2] is not None:
            torch.cuda.set_rng_state_all(self.rng[2])
        if self.np_rng is not None:
            import numpy

            numpy.random.set_state(self.np_rng)
        if self.cgas is _MISSING:
            self.trainer.__dict__.pop("current_gradient_accumulation_steps", None)
        else:
            self.trainer.current_gradient_accumulation_steps = self.cgas
        return False


_MISSING = object()


def _dropout_off(model, ctx: _restored) -> List[str]:
    """Set every dropout rate of ``model`` to 0 (``ctx`` puts them back); their names."""
    names = []
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0:
            ctx.dropout.append((m, "p", m.p))
            m.p = 0.0
            names.append(name or type(m).__name__)
            continue
        # Attention layers that pass a float rate to scaled_dot_product_attention (Llama's attention_dropout).
        for attr, value in list(vars(m).items()):
            if "dropout" in attr and isinstance(value, float) and not isinstance(value, bool) and value > 0:
                ctx.dropout.append((m, attr, value))
                setattr(m, attr, 0.0)
                names.append(f"{name}.{attr}" if name else attr)
    return names


# ---------------------------------------------------------------------- watch
_HF_ADVICE = {
    "GG105": (
        "In the HF Trainer, micro-batches are weighted by their token counts only when the loss divides its token sum "
        "by num_items_in_batch: run gradguard.integrations.transformers.check_trainer(trainer) to see the cause and its fix."
    ),
    "GG104": (
        "In the HF Trainer, a compute_loss that returns a per-micro-batch mean must not accept num_items_in_batch "
        "(or set loss_is_scaled_for_ga = False): check with gradguard.integrations.transformers.check_trainer(trainer)."
    ),
}


class Watch(TrainerCallback):
    """A ``TrainerCallback`` running :class:`gradguard.watch` during ``trainer.train()``.

    Findings about the loss point at the trainer subclass's ``compute_loss``
    when it overrides one (else at the ``train()`` call); the advice is the
    Trainer's (:func:`check_trainer`), not a hand-written loop.

    Args:
        mode: ``"warn"``, ``"raise"`` or ``"record"`` (see :class:`gradguard.watch`).
        ignore: rule codes (or prefixes) not to report.

    Attributes:
        findings: the :class:`gradguard.Finding` list.

    >>> w = Watch(mode="record")
    >>> # Trainer(..., callbacks=[w]).train(); print(w.findings)
    """

    def __init__(self, mode: str = "warn", ignore=()) -> None:
        self._fw = FrameworkWatch(mode, ignore, _HF_ADVICE)

    @property
    def findings(self):
        return self._fw.findings

    def on_train_begin(self, args, state, control, **kwargs):
        trainer = _calling_trainer()
        site = (None, None)
        if trainer is not None and type(trainer).compute_loss is not Trainer.compute_loss:
            site = loss_line(type(trainer).compute_loss)
        self._fw.start(site)

    def on_train_end(self, args, state, control, **kwargs):
        self._fw.stop()

    def close(self) -> None:
        """Leave the watch now (after ``train()`` raised: the Trainer has no callback for that)."""
        self._fw.stop(RuntimeError("train() did not finish"))


def _calling_trainer() -> Optional[Trainer]:
    # A TrainerCallback is not handed the Trainer; the Trainer calling it is on the stack.
    frame = sys._getframe(1)
    while frame is not None:
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, Trainer):
            return candidate
        frame = frame.f_back
    return None

