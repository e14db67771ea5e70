"""The HF ``Trainer``: is its accumulated gradient the full-batch one (:func:`check_trainer`), make it so
(:func:`exact`), and the watch during ``train()`` (:class:`Watch`).

The Trainer is exact when it can pass ``num_items_in_batch`` (the window's
count of target tokens) to a loss that divides its token sum by it. It is
not when the model's ``forward`` takes no ``**kwargs`` (it then averages the
micro-batch means), when the forward takes ``**kwargs`` but its loss never
sees the count (BERT-style heads, T5, Bart: a per-micro-batch mean that the
Trainer takes as already scaled, so a gradient about K times too large), when
a ``compute_loss`` override accepts ``num_items_in_batch`` but returns a
per-micro-batch mean, or when the Trainer counts other items than the loss
averages over (a causal LM whose ``loss_type`` is unset: every non-ignored
label is counted, though the loss shifts labels and never targets position 0).
:func:`check_trainer` measures which case a given trainer is in, on its own
data and through its own ``training_step``; :func:`exact` repairs all of them.
"""

from __future__ import annotations

import copy
import inspect
import random
import sys
from typing import List, Optional

from . import require

require("transformers", "transformers")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from transformers import Trainer, TrainerCallback  # noqa: E402
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES  # noqa: E402

try:  # where Trainer.compute_loss takes it from (transformers >= 4.46); before, from transformers.trainer
    from transformers.trainer_utils import _is_peft_model  # noqa: E402
except ImportError:  # pragma: no cover - older transformers
    from transformers.trainer import _is_peft_model  # noqa: E402

from .._errors import GradguardError
from ._watch import FrameworkWatch, loss_line

__all__ = ["check_trainer", "exact", "TrainerCheck", "Watch"]

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
    window's full batch (the micro-batches joined, padded at the end) run
    through a float64 copy of the model with its labels: the model's own loss,
    the mean over all its target tokens. A ``compute_loss`` override or a
    ``compute_loss_func`` defines the loss instead (also for a model that
    returns only logits): the full batch goes through it, with
    ``num_items_in_batch`` the count of the targets its sum runs over (shifted
    or not, read from the logits it returns), so a Trainer count that differs
    shows. Dropout is switched off for
    both. Afterwards the model's parameters, buffers and gradients, the
    optimizer and the random-number generators are as they were. On
    DeepSpeed, before ``train()`` builds the engine, the engine's backward is
    run as the Trainer calls it (not divided by the accumulation steps).

    Args:
        trainer: a ``transformers.Trainer`` with a ``train_dataset``, in one process (on DeepSpeed:
            before ``train()``).
        rtol: the relative difference still called equivalent (default: 1e-4
            for float32 models, 2e-2 for 16-bit ones).

    Returns:
        a :class:`TrainerCheck` (``.equivalent``, ``.max_rel_diff``, ``.causes``).

    Raises:
        GradguardError: no train dataset, several processes, batches without ``labels``, a
            DeepSpeed engine already built, or a ``compute_loss`` override that fails on (or ignores)
            the float64 copy of the model and the joined batch (it cannot be judged).

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
    deepspeed = _on_deepspeed(trainer)
    if deepspeed and getattr(trainer.accelerator, "deepspeed_engine_wrapped", None) is not None:
        raise GradguardError(
            "the trainer's DeepSpeed engine is built (train() ran), and it partitions and steps the gradients itself: "
            "run check_trainer(trainer) before trainer.train()"
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
        if deepspeed:
            # Before train() there is no engine yet. The Trainer calls the engine's backward with
            # scale_wrt_gas=False (no division by gradient_accumulation_steps), which is a plain
            # backward of the same loss in float32: run that instead.
            saved.backward = trainer.accelerator.__dict__.get("backward", _MISSING)
            trainer.accelerator.backward = lambda loss, **kwargs: loss.backward()
        for b in batches:
            try:
                trainer.training_step(model, b, num_items)
            except GradguardError:
                raise
            except Exception as e:  # the trainer's own step: train() fails the same way
                raise GradguardError(_step_failed(trainer, model, b, e)) from e
        got = [p.grad.detach().double() if p.grad is not None else torch.zeros_like(p, dtype=torch.float64)
               for _, p in params]
        scale_free = _ignores_num_items(trainer, model, batches[0], num_items)
        want, items, shifted = _reference(trainer, model, [n for n, _ in params],
                                          [trainer._prepare_inputs(b) for b in batches], num_items)

    # Relative to the largest gradient entry of the whole model (a per-parameter ratio would
    # magnify float32 rounding in parameters whose gradient is nearly zero).
    scale = max(float(w.abs().max()) for w in want) or 1.0
    diff = max(float((g - w).abs().max()) for g, w in zip(got, want)) / scale
    equivalent = diff <= rtol
    n_items = int(num_items) if num_items is not None else None
    causes = [] if equivalent else _causes(trainer, items, n_items, shifted, scale_free, len(batches), k, deepspeed)
    return TrainerCheck(equivalent, diff, causes, len(batches), items, n_items, dropout_off)


# ---------------------------------------------------------------- reference
def _reference(trainer, model, names, batches, num_items):
    """float64 gradient of the window's full batch; per-micro-batch items; does the loss shift labels?

    The micro-batches are joined into one batch (padded at the end: labels with -100, masks with 0) that goes
    through a float64 copy of the model. The loss is the one the trainer trains on: a ``compute_loss`` override
    or a ``compute_loss_func`` defines it (:func:`_trainer_defined_loss`); otherwise the model's own loss with
    its labels (decoder inputs built from labels, shifted targets), or, for a model that returns none, the
    token-mean cross entropy of its logits.
    """
    ref = copy.deepcopy(model).double()
    ref.zero_grad(set_to_none=True)
    full = _joined(batches, getattr(getattr(model, "config", None), "pad_token_id", None))
    labels = full["labels"]
    if _loss_defined_by_trainer(trainer):
        own, shifted = _trainer_defined_loss(trainer, ref, full, num_items)
    elif trainer.label_smoother is not None:
        # The Trainer's label smoothing, with the shift its compute_loss takes for this model (through PEFT). The
        # labels go to the model too: an encoder-decoder builds its decoder inputs from them.
        logits = _logits(ref(**full))
        shifted = _smoother_shifts(trainer, model)
        targets = full["shift_labels"] if "shift_labels" in full else (labels[..., 1:] if shifted else labels)
        if shifted and "shift_labels" not in full:
            logits = logits[..., :-1, :]
        own = _smoothed_mean(logits, targets, trainer.label_smoother)
    else:
        out = ref(**full)
        own, logits = _own_loss(out), (out["logits"] if hasattr(out, "keys") and "logits" in out.keys() else None)
        shifted = False
        if "shift_labels" in full:
            shifted = None  # the collator aligned the targets (counted as they are)
        elif own is not None and logits is not None and labels.dim() >= 2:
            with torch.no_grad():
                shifted = bool((own - _mean_ce(logits[..., :-1, :], labels[..., 1:])).abs()
                               < (own - _mean_ce(logits, labels)).abs())
        if own is None:
            if logits is None:
                raise GradguardError(
                    f"{type(model).__name__} returned neither a loss nor logits for a batch with labels: return "
                    "{'loss': ...} or {'logits': ...} from forward, or make the loss in a Trainer.compute_loss override"
                )
            own = _mean_ce(logits, labels)
    own.backward()
    grads = dict(ref.named_parameters())
    if _loss_defined_by_trainer(trainer) and all(grads[n].grad is None for n in names):
        raise GradguardError(
            f"check_trainer cannot judge this trainer: {_loss_maker(trainer)} gave the full batch a loss that does "
            "not depend on the model it was given (a float64 copy of trainer.model): compute the loss with the "
            "model argument, not self.model"
        )
    want = [grads[n].grad.detach() if grads[n].grad is not None else torch.zeros_like(grads[n]) for n in names]
    counts = [int((_counted(b, shifted) != IGNORE).sum()) for b in batches]
    return want, counts, bool(shifted)


def _counted(batch, shifted):
    if "shift_labels" in batch:
        return batch["shift_labels"]
    return batch["labels"][..., 1:] if shifted else batch["labels"]


def _smoothed_mean(logits, targets, smoother):
    """The Trainer's ``LabelSmoother`` over the window as one batch: a mean over its target tokens."""
    flat, targets = logits.reshape(-1, logits.shape[-1]), targets.reshape(-1).to(logits.device)
    kept = targets.ne(smoother.ignore_index)
    logp = F.log_softmax(flat, dim=-1)
    nll = -logp.gather(-1, targets.clamp(min=0)[:, None]).squeeze(-1).masked_fill(~kept, 0.0).sum()
    smooth = -logp.sum(-1).masked_fill(~kept, 0.0).sum() / flat.shape[-1]
    n = kept.sum().clamp(min=1)
    return ((1 - smoother.epsilon) * nll + smoother.epsilon * smooth) / n


def _loss_defined_by_trainer(trainer) -> bool:
    return type(trainer).compute_loss is not Trainer.compute_loss or trainer.compute_loss_func is not None


def _loss_maker(trainer) -> str:
    if type(trainer).compute_loss is not Trainer.compute_loss:
        return f"{type(trainer).__name__}.compute_loss"
    return "the trainer's compute_loss_func"


def _trainer_defined_loss(trainer, ref, full, num_items):
    """The full batch's token-mean loss as the trainer's own ``compute_loss`` makes it, on the float64 ``ref``.

    A loss that ignores ``num_items_in_batch`` is a mean already: its full-batch value is the reference. A loss
    that divides a sum by it is called with the count of the targets that sum runs over: the labels, or the
    labels after the first position when the sum is the shifted cross entropy of the returned logits (then a
    Trainer count of every label is a miscount the check must see, not copy). Any other loss is called with
    the Trainer's own count. Returns the loss (with its graph) and whether the targets are shifted.
    """
    name = _loss_maker(trainer)
    labels = full["labels"]

    def run(n, return_outputs=False):
        try:
            out = trainer.compute_loss(ref, dict(full), return_outputs=return_outputs, num_items_in_batch=n)
            # An override that returns (loss, outputs) whatever return_outputs says: take the loss.
            return out if return_outputs or not isinstance(out, (tuple, list)) else out[0]
        except Exception as e:  # the user's code on a float64 copy and one joined batch
            raise GradguardError(
                f"check_trainer cannot judge this trainer: {name} failed on the window's micro-batches joined into "
                f"one float64 batch, its reference ({type(e).__name__}: {e}). It must work on any batch of the "
                "train dataset, with the model it is given (not self.model) and any num_items_in_batch"
            ) from e

    n1 = num_items
    with torch.no_grad():
        first = run(n1, return_outputs=True)
        loss1, outputs = first if isinstance(first, (tuple, list)) else (first, None)
        loss2 = run(None if n1 is None else n1 * 2)
    if not (torch.is_tensor(loss1) and loss1.numel() == 1):
        raise GradguardError(f"check_trainer cannot judge this trainer: {name} returned "
                             f"{type(loss1).__name__}, not a scalar loss tensor")
    a, b = float(loss1), float(loss2)
    scale_free = n1 is None or a == b or abs(a - b) <= 1e-9 * max(abs(a), abs(b))
    n = float(n1) if n1 is not None else None
    divides = not scale_free and abs(a * n - b * 2 * n) <= 1e-6 * abs(a * n)

    plain_count, shifted_count = int((labels != IGNORE).sum()), int((labels[..., 1:] != IGNORE).sum())
    logits = outputs["logits"] if hasattr(outputs, "keys") and "logits" in outputs.keys() else None
    shifted = False
    if logits is not None and labels.dim() >= 2 and logits.shape[:-1] == labels.shape:
        with torch.no_grad():
            plain = _sum_ce(logits, labels)
            shift = _sum_ce(logits[..., :-1, :], labels[..., 1:])
        if scale_free:  # compare means
            plain, shift, value = plain / max(plain_count, 1), shift / max(shifted_count, 1), a
        else:  # compare sums
            value = a * n
        shifted = abs(value - shift) < abs(value - plain)
        matched = min(abs(value - shift), abs(value - plain)) <= 1e-6 * max(abs(value), 1e-12)
    else:
        matched = False
    if scale_free:
        target = n1
    elif divides and matched:
        target = torch.as_tensor(shifted_count if shifted else plain_count, device=labels.device)
        if torch.is_tensor(n1):
            target = target.to(n1.dtype)
    else:
        target = n1
    return run(target), shifted


def _sum_ce(logits, labels):
    return float(F.cross_entropy(logits.double().reshape(-1, logits.shape[-1]), labels.reshape(-1).to(logits.device),
                                 ignore_index=IGNORE, reduction="sum"))


def _joined(batches, pad_id):
    """One batch from the micro-batches: dim 0 concatenated, other dims padded at the end to the longest."""
    out = {}
    for key in batches[0]:
        values = [b[key] for b in batches]
        if key.startswith(("cu_seq_lens", "max_length")):
            # FlashAttention's boundaries of the sequences packed in one row (DataCollatorWithFlattening's
            # return_flash_attn_kwargs): rows joined on dim 0 keep their own position_ids, from which the
            # model finds the same boundaries, so these are left out.
            continue
        if not all(torch.is_tensor(v) for v in values):
            raise GradguardError(f"the batches' {key!r} is not a tensor in every micro-batch: check_trainer joins "
                                 "the window's micro-batches into one batch")
        if "label" in key:
            fill = IGNORE
        elif "mask" in key:
            fill = 0
        else:
            fill = pad_id if pad_id is not None and "ids" in key else 0
        shape = [max(v.shape[d] for v in values) for d in range(values[0].dim())]
        padded = []
        for v in values:
            if list(v.shape[1:]) != shape[1:]:
                grown = v.new_full([v.shape[0]] + shape[1:], fill)
                grown[tuple(slice(0, n) for n in v.shape)] = v
                v = grown
            padded.append(v)
        out[key] = torch.cat(padded)
        if out[key].is_floating_point():
            out[key] = out[key].double()
    return out


def _step_failed(trainer, model, batch, e) -> str:
    msg = (f"the trainer's own training_step failed on the first micro-batch of its first window "
           f"({type(e).__name__}: {e}), so train() would fail the same way")
    unwrapped = trainer.accelerator.unwrap_model(model)
    if (trainer.label_smoother is not None and getattr(getattr(unwrapped, "config", None), "is_encoder_decoder", False)
            and "decoder_input_ids" not in batch):
        msg += (": with label_smoothing_factor the Trainer takes the labels out of the batch before the forward, so "
                f"{type(unwrapped).__name__} gets no decoder inputs. Fix: give the batches decoder_input_ids "
                "(DataCollatorForSeq2Seq(tokenizer, model=model) makes them), or call " + _EXACT_FIX
                + " (its loss passes the labels to the model)")
    return msg


def _ignores_num_items(trainer, model, batch, num_items) -> bool:
    """Whether ``compute_loss`` returns the same loss for two different ``num_items_in_batch`` (it ignores it)."""
    if num_items is None:
        return False
    inputs = trainer._prepare_inputs(batch)
    with torch.no_grad():
        # A copy each time: Trainer.compute_loss pops the labels when a compute_loss_func is set.
        a = trainer.compute_loss(model, dict(inputs), num_items_in_batch=num_items)
        b = trainer.compute_loss(model, dict(inputs), num_items_in_batch=num_items * 2)
    return bool(torch.equal(a.detach(), b.detach()))


_EXACT_FIX = "gradguard.integrations.transformers.exact(trainer) before train()"


def _on_deepspeed(trainer) -> bool:
    return getattr(trainer.accelerator.distributed_type, "value", None) == "DEEPSPEED"


def _causes(trainer, items, num_items, shifted, scale_free, micro, k, deepspeed=False) -> List[str]:
    out = []
    overridden = type(trainer).compute_loss is not Trainer.compute_loss
    scaled = trainer.loss_is_scaled_for_ga
    if scaled is None:
        scaled = (trainer.model_accepts_loss_kwargs and num_items is not None) or trainer.compute_loss_func is not None
    model_name = type(trainer.accelerator.unwrap_model(trainer.model)).__name__
    if num_items is None and not trainer.model_accepts_loss_kwargs and trainer.compute_loss_func is None:
        out.append(
            f"the model's forward takes no **kwargs, so the Trainer cannot pass num_items_in_batch and averages the "
            f"{micro} micro-batch means with equal weights although they average over {items} items (a mean of means). "
            f"Fix: {_EXACT_FIX}; or give forward a **kwargs (num_items_in_batch) and return the summed loss divided "
            "by it"
        )
    elif scale_free and scaled and overridden:
        out.append(
            f"{type(trainer).__name__}.compute_loss ignores num_items_in_batch and returns each micro-batch's mean, but "
            f"the Trainer takes the loss as already scaled and does not divide it by {micro}: the gradient is about "
            f"{micro} times too large. Fix: return the loss summed over tokens divided by num_items_in_batch, or set "
            f"loss_is_scaled_for_ga = False on {type(trainer).__name__} (a mean of means)"
        )
    elif scale_free and scaled and trainer.compute_loss_func is not None:
        out.append(
            f"the compute_loss_func ignores num_items_in_batch and returns each micro-batch's mean, but the Trainer "
            f"takes it as already scaled and does not divide it by {micro}: the gradient is about {micro} times too "
            "large. Fix: return the loss summed over tokens divided by num_items_in_batch"
        )
    elif scale_free and scaled:
        out.append(
            f"{model_name}'s loss is a per-micro-batch mean that never sees num_items_in_batch, though its forward "
            "takes **kwargs: the Trainer passes the count, takes the loss as already scaled and does not divide it "
            f"by {micro}, so the gradient is about {micro} times too large (and weighs the micro-batches' "
            f"{items} items equally)"
            + (". On DeepSpeed the Trainer also turns off the engine's own division by gradient_accumulation_steps "
               "(scale_wrt_gas=False), so nothing divides by it there either" if deepspeed else "")
            + f". Fix: {_EXACT_FIX}"
        )
    elif num_items is not None and num_items != sum(items):
        loss_type = getattr(_underneath(trainer, trainer.model), "loss_type", None)
        if shifted and getattr(trainer, "_loss_shifts_labels", None) is False and loss_type is None:
            # The Trainer counts labels[..., 1:] only for a model whose loss_type is the causal-LM one.
            who = f"{type(trainer).__name__}.compute_loss" if overridden else "the model's loss"
            why = (f" ({_underneath(trainer, trainer.model)._get_name()}'s loss_type is unset, so the Trainer counts "
                   f"every non-ignored label, though {who} shifts labels and never targets position 0 of a row)")
            fix = ("set model.loss_type = 'ForCausalLM' before building the trainer (it then counts labels[..., 1:])"
                   + ("" if overridden else f"; or {_EXACT_FIX}"))
        elif shifted and overridden:
            why = (f" ({type(trainer).__name__}.compute_loss shifts labels, so position 0 of each row is never a "
                   "target, but the Trainer counts every non-ignored label)")
            fix = ("divide the summed loss by the count of labels[..., 1:] != -100 over the window (override "
                   "get_batch_samples to count those)")
        elif shifted:
            why = (" (the model's loss shifts labels, so position 0 of each row is never a target, but its loss_type "
                   "is unset and the Trainer counts every non-ignored label)")
            fix = f"{_EXACT_FIX}; or set model.loss_type = 'ForCausalLM' before building the Trainer"
        else:
            why, fix = "", f"{_EXACT_FIX}; or make the count and the loss use the same targets"
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
        self.backward = None  # the accelerator's backward, when the check replaced it
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
        if self.backward is _MISSING:
            self.trainer.accelerator.__dict__.pop("backward", None)
        elif self.backward is not None:
            self.trainer.accelerator.backward = self.backward
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


# ---------------------------------------------------------------------- exact
def exact(trainer: Trainer) -> Trainer:
    """Make ``trainer``'s accumulated gradient the full-batch token-mean gradient of each window, in place.

    Every micro-batch's loss becomes its cross-entropy summed over its target
    tokens divided by the window's target count (over all processes), so the
    window's gradient is the gradient of the mean over all its target tokens,
    whatever the model: models whose forward takes ``**kwargs`` and models
    whose loss never sees ``num_items_in_batch`` (BERT-style heads, T5, Bart,
    a custom module), causal LMs (the shifted targets are counted, not every
    label), the epoch's final partial window, several processes (DDP or
    DeepSpeed), and the Trainer's label smoothing (with the shift the
    Trainer's own ``compute_loss`` takes, read through PEFT). The labels go
    to the model too, and its own loss (computed there anyway) is checked
    against that token mean on every micro-batch, judged once per window
    before the window's last backward: a model with another loss (another
    ignored label, another reduction) is refused before any update. The first
    micro-batch with targets tells whether the loss shifts labels.

    A ``compute_loss`` override that divides a token sum by its
    ``num_items_in_batch`` (TRL's ``SFTTrainer``) is kept: exact() gives it
    the count of the targets the model's loss has and checks what it returns
    (every window, from the backward's d(loss)/d(count), before the optimizer
    step: the loss is ``c / count``; on the first window: ``c`` is the cross
    entropy summed over those targets). Any other override (a preference loss
    as DPO's, a mean that ignores the count) is refused before any update.

    The Trainer's count and loss hooks are the ones set:
    ``trainer.get_batch_samples`` counts the window's targets (one all-gather
    per window with several processes, as the Trainer's own count),
    ``trainer.compute_loss`` makes the loss above while training (evaluation
    is unchanged), ``model_accepts_loss_kwargs = False`` (the Trainer neither
    counts again nor passes the count to the model) and
    ``loss_is_scaled_for_ga = True`` (the Trainer does not divide by K).
    Optimizer, scheduler, clipping, mixed precision, logging and random
    numbers are untouched; the logged ``loss`` is the exact window mean.

    Args:
        trainer: a ``transformers.Trainer`` (or a subclass, TRL's ``SFTTrainer`` included), before ``train()``.

    Returns:
        the same ``trainer``.

    Raises:
        GradguardError: a ``compute_loss_func`` (its loss cannot be seen into: the message says what
            to change), DataParallel over several GPUs in one process, tensor/context/sequence
            parallelism; during ``train()``, before the update of the window concerned: a model whose
            loss is not the token-mean cross entropy over its labels, an override whose loss is not a
            token sum divided by ``num_items_in_batch``, or batches without ``labels``.

    >>> trainer = exact(Trainer(model=model, args=args, train_dataset=data))   # doctest: +SKIP
    >>> check_trainer(trainer).equivalent                                    # doctest: +SKIP
    True
    """
    if not isinstance(trainer, Trainer):
        raise GradguardError(f"exact needs a transformers.Trainer, got {type(trainer).__name__}")
    if isinstance(trainer.__dict__.get("compute_loss"), _ExactLoss.Bound):
        return trainer  # already exact
    cls = type(trainer)
    if trainer.compute_loss_func is not None:
        fn = trainer.compute_loss_func
        raise GradguardError(
            f"the trainer has compute_loss_func={getattr(fn, '__qualname__', type(fn).__name__)}, whose loss exact() "
            "cannot see into: make it return the loss summed over target tokens divided by num_items_in_batch and "
            "check it with check_trainer, or build the Trainer without compute_loss_func and call exact(trainer)"
        )
    if trainer.args.n_gpu > 1:
        raise GradguardError(
            f"this trainer runs DataParallel over n_gpu={trainer.args.n_gpu} GPUs in one process, where a loss cannot "
            "be weighted per device: launch one process per GPU (torchrun / accelerate launch) and call exact(trainer)"
        )
    split = {"tensor": trainer.get_tp_size(), "context": trainer.get_cp_size(), "sequence": trainer.get_sp_size()}
    split = {k: v for k, v in split.items() if v > 1}
    if split:
        raise GradguardError(
            "exact() counts each process's targets once, but this run splits batches by "
            + ", ".join(f"{k} parallelism of size {v}" for k, v in split.items())
            + ": train without exact(), and check the window gradient with check_trainer on a single process"
        )
    fix = _ExactLoss(trainer) if cls.compute_loss is Trainer.compute_loss else _ExactOverride(trainer)
    trainer.get_batch_samples = _ExactLoss.Bound(fix.get_batch_samples)
    trainer.compute_loss = _ExactLoss.Bound(fix.compute_loss)
    if isinstance(fix, _ExactOverride):
        trainer.add_callback(_WindowCheck(fix))
    trainer.model_accepts_loss_kwargs = False
    trainer.loss_is_scaled_for_ga = True
    return trainer


class _ExactLoss:
    """The window count and the micro-batch loss that :func:`exact` gives a trainer."""

    class Bound:
        """A method set on one trainer instance by :func:`exact` (tells :func:`exact` it ran already)."""

        def __init__(self, fn):
            self.fn = fn
            self.__wrapped__ = fn

        def __call__(self, *args, **kwargs):
            return self.fn(*args, **kwargs)

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        self.original_batches = trainer.get_batch_samples  # the class's (or subclass's) own, bound
        self.shifted: Optional[bool] = None  # does the loss target labels[..., 1:]?
        self.learned = False  # was the shift read from the model's own loss (else: the Trainer's rule, for now)
        self.smoother = trainer.label_smoother
        if self.smoother is not None:
            # The Trainer's own shift for its label smoother, read as its compute_loss reads it (through PEFT).
            self.shifted, self.learned = _smoother_shifts(trainer, trainer.model), True
        self.ignore = self.smoother.ignore_index if self.smoother is not None else IGNORE
        self.window = 0  # windows begun
        self.left = 0  # micro-batches of the window not yet through compute_loss
        self.gaps: list = []  # per micro-batch of the window: (model's own loss, token mean, targets), detached

    # The Trainer calls this once per window with the window's micro-batches.
    def get_batch_samples(self, epoch_iterator, num_batches, device):
        batches, _ = self.original_batches(epoch_iterator, num_batches, device)
        if not batches:
            return batches, None
        if any("labels" not in b for b in batches):
            raise GradguardError(
                "exact() weights micro-batches by their target tokens, read from each batch's 'labels'; this batch "
                f"has only {sorted(batches[0].keys())}: give the batches labels (-100 where nothing is predicted)"
            )
        if not self.learned:
            self._learn_the_loss(batches)
        local = sum(self._targets(b).ne(self.ignore).sum() for b in batches).to(device)
        if self.trainer.args.world_size > 1:
            # One collective per window for the global count, as the Trainer's own count under
            # average_tokens_across_devices (which exact() needs whatever that flag says).
            local = self.trainer.accelerator.gather(local.reshape(1)).sum()
        self.window += 1
        self.left, self.gaps = len(batches), []
        return batches, local

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        trainer = self.trainer
        if num_items_in_batch is None or not model.training:  # evaluation, or a call outside train()
            return Trainer.compute_loss(trainer, model, inputs, return_outputs=return_outputs,
                                        num_items_in_batch=num_items_in_batch)
        # The labels go to the model too: its own loss (a micro-batch mean, computed there anyway) is
        # what every micro-batch's token mean below is checked against.
        outputs = model(**inputs)
        own = _own_loss(outputs)
        if own is None:
            raise GradguardError(
                f"{type(trainer.accelerator.unwrap_model(model)).__name__} returned no loss for a batch with labels, "
                "so exact() cannot check that its loss is the token-mean cross entropy it makes exact: return "
                "{'loss': ..., 'logits': ...} from forward when labels are given"
            )
        logits, targets = _logits(outputs), self._targets(inputs)
        if self.shifted and "shift_labels" not in inputs:
            if logits.shape[:-1] == inputs["labels"].shape:
                # The targets moved, not the logits (as the models' own losses do): slicing the logits would copy
                # them, and their gradient, once per micro-batch (a third of this loss's time on a small LM).
                targets = F.pad(targets, (0, 1), value=self.ignore)
            else:
                logits = logits[..., :-1, :]
        if logits.dtype in (torch.float16, torch.bfloat16):
            logits = logits.float()  # as the models' own losses and the Trainer's label smoother do
        flat, targets = logits.reshape(-1, logits.shape[-1]), targets.reshape(-1).to(logits.device)
        kept = targets.ne(self.ignore)
        # A window without any target (all labels ignored) has no direction: a zero loss, not 0/0.
        total = num_items_in_batch.clamp(min=1) if torch.is_tensor(num_items_in_batch) else max(num_items_in_batch, 1)
        if self.smoother is not None:
            # The Trainer's LabelSmoother, with the count of the targets it sums over.
            logp = F.log_softmax(flat, dim=-1)
            nll = -logp.gather(-1, targets.clamp(min=0)[:, None]).squeeze(-1).masked_fill(~kept, 0.0).sum()
            smooth = -logp.sum(-1).masked_fill(~kept, 0.0).sum() / flat.shape[-1]
            eps = self.smoother.epsilon
            loss = ((1 - eps) * nll + eps * smooth) / total
        else:
            nll = F.cross_entropy(flat, targets, ignore_index=self.ignore, reduction="sum")
            loss = nll / total
        self._check(own, nll, kept.sum(), logits.dtype)
        if trainer.args.world_size > 1:
            loss = loss * trainer.args.world_size  # DDP and DeepSpeed average the gradients over processes
        if hasattr(outputs, "keys") and "loss" in outputs.keys():
            outputs["loss"] = loss
        return (loss, outputs) if return_outputs else loss

    # ------------------------------------------------------------- helpers
    def _targets(self, batch):
        if "shift_labels" in batch:  # padding-free collators give the targets already aligned with the logits
            return batch["shift_labels"]
        labels = batch["labels"]
        return labels[..., 1:] if self.shifted else labels

    def _check(self, own, nll, count, dtype) -> None:
        """Keep the gap between the model's own loss and the token mean; judge the window at its last micro-batch.

        Kept as tensors (no host read) until the window's last micro-batch, then one read (and, with several
        processes, one all-reduce) per window, before that micro-batch's backward and the optimizer step.
        """
        self.gaps.append((own.detach().float(), nll.detach().float(), count.detach()))
        self.left -= 1
        if self.left > 0:
            return
        own_l, sums, counts = (torch.stack(x).reshape(len(self.gaps), -1)[:, 0] for x in zip(*self.gaps))
        mean = sums / counts.clamp(min=1)
        finite = torch.isfinite(own_l)
        # With targets: the model's mean must be the token mean. Without: the model has no target either
        # (its 0/0, or a 0 it returns for an empty batch).
        gap = torch.where(counts > 0, (own_l - mean).abs() / own_l.abs().clamp(min=1),
                          torch.where(finite, own_l.abs(), torch.zeros_like(own_l)))
        gap = torch.where(torch.isnan(gap), torch.full_like(gap, float("inf")), gap)
        worst = gap.max()
        if self.trainer.args.world_size > 1 and torch.distributed.is_initialized():
            # Every process refuses together (one alone would leave the others waiting in the next collective).
            worst = worst.to(self.trainer.args.device)
            torch.distributed.all_reduce(worst, op=torch.distributed.ReduceOp.MAX)
        tol = 1e-3 if dtype in (torch.float16, torch.bfloat16) else 1e-4
        if float(worst) <= tol:
            return
        i = int(gap.argmax())
        model = self.trainer.accelerator.unwrap_model(self.trainer.model)
        raise GradguardError(
            f"{type(model).__name__}'s own loss on micro-batch {i + 1} of window {self.window} "
            f"({float(own_l[i]):.6g}) is not the token-mean cross entropy of its logits over the labels != "
            f"{self.ignore}{' after the first position' if self.shifted else ''} ({float(mean[i]):.6g} over "
            f"{int(counts[i])} targets), the loss exact() makes exact (it ignores another label value, or "
            "weighs or reduces its tokens otherwise); nothing was updated in this window: give the ignored positions "
            f"the label {self.ignore}, or weight the micro-batches yourself in a compute_loss that returns the summed "
            "loss divided by num_items_in_batch and check it with check_trainer"
        )

    def _learn_the_loss(self, batches) -> None:
        """Decide from the model's own loss whether it shifts labels (the first micro-batch with targets decides).

        Until a micro-batch has a target, the Trainer's rule stands in (a window without targets counts 0 either
        way, or is refused by the check of every micro-batch).
        """
        trainer = self.trainer
        model = trainer.accelerator.unwrap_model(trainer.model)
        self.shifted = _smoother_shifts(trainer, trainer.model) or bool(getattr(trainer, "_loss_shifts_labels", False))
        if all("shift_labels" in b for b in batches):
            return  # the collator aligned the targets: nothing to shift
        training = model.training
        model.eval()  # no dropout (the two forwards below must see the same logits), no random numbers drawn
        try:
            with torch.no_grad():
                for batch in batches:
                    batch = trainer._prepare_inputs(batch)
                    out = model(**batch)
                    own = _own_loss(out)
                    if own is None:
                        raise GradguardError(
                            f"{type(model).__name__} returned no loss for a batch with labels, so exact() cannot "
                            "check that its loss is the token-mean cross entropy it makes exact: return "
                            "{'loss': ..., 'logits': ...} from forward when labels are given"
                        )
                    labels = batch["labels"]
                    if not torch.isfinite(own) or labels.dim() < 2:
                        continue  # no target in this micro-batch (0/0): try the next one
                    logits = _logits(out)
                    plain = _mean_ce(logits, labels)
                    shifted = _mean_ce(logits[..., :-1, :], labels[..., 1:])
                    self.shifted = abs(float(own - shifted)) < abs(float(own - plain))
                    self.learned = True
                    return  # whether the loss is that token mean: checked on every micro-batch while training
        finally:
            model.train(training)


def _underneath(trainer, model):
    """The model under the accelerator's wrappers and a PEFT model, as ``Trainer.compute_loss`` reads it."""
    unwrapped = trainer.accelerator.unwrap_model(model)
    return unwrapped.base_model.model if _is_peft_model(unwrapped) else unwrapped


class _ExactOverride(_ExactLoss):
    """:func:`exact` for a trainer whose ``compute_loss`` override divides a token sum by ``num_items_in_batch``.

    The override stays (TRL's ``SFTTrainer``: its fused LM head, metrics, completion masks, packing); exact()
    gives it the window's count of the targets the model's own loss has (shifted for a causal LM, or the
    collator's ``shift_labels``) and checks what it does with it. Every window: the count is passed as a
    float leaf tensor that requires grad, so the backward the Trainer runs anyway also gives d(loss)/d(count);
    a loss ``c / count`` (whatever ``c``) has ``loss = -count * d(loss)/d(count)``, summed over the window,
    checked before the optimizer step (one host read per window). The first window also checks ``c``: the
    override's loss times the count is the cross entropy summed over those targets (times the processes,
    whose gradients DDP averages), from a forward without grad of each of its micro-batches.
    """

    def __init__(self, trainer: Trainer) -> None:
        super().__init__(trainer)
        cls = type(trainer)
        self.name = f"{cls.__name__}.compute_loss"
        self.path, self.line = _source_of(cls.compute_loss)
        self.count = None  # this window's count, the leaf whose gradient the backward fills
        self.returned = []  # the losses returned in this window, detached
        self.sums = []  # first window: (returned, the cross-entropy sum over the targets), detached

    def get_batch_samples(self, epoch_iterator, num_batches, device):
        try:
            batches, local = super().get_batch_samples(epoch_iterator, num_batches, device)
        except GradguardError as e:
            raise GradguardError(
                f"{self.name} ({self.path}:{self.line}) trains on batches without 'labels': its objective is not a "
                "token mean over labels (a preference or reward loss, as DPO's), which is what exact() makes exact; "
                "train it without exact()" if "'labels'" in str(e) else str(e)) from e
        if local is not None:
            self.count = local.detach().to(torch.float32).requires_grad_(True)
            self.returned = []
            return batches, self.count
        return batches, local

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        trainer, cls = self.trainer, type(self.trainer)
        if num_items_in_batch is None or not model.training or num_items_in_batch is not self.count:
            return cls.compute_loss(trainer, model, inputs, return_outputs=return_outputs,
                                    num_items_in_batch=num_items_in_batch)
        first = self.window == 1
        if first:
            with torch.no_grad():
                plain = {k: v for k, v in inputs.items() if k != "labels"}
                logits = _logits(model(**plain))
                targets = self._targets(inputs)
                if self.shifted and "shift_labels" not in inputs:
                    logits = logits[..., :-1, :]
                ce = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                                     targets.reshape(-1).to(logits.device), ignore_index=IGNORE, reduction="sum")
        out = cls.compute_loss(trainer, model, inputs, return_outputs=return_outputs,
                               num_items_in_batch=num_items_in_batch)
        loss = out[0] if isinstance(out, (tuple, list)) else out
        self.returned.append(loss.detach().float().reshape(()))
        if first:
            self.sums.append((loss.detach().float().reshape(()), ce.detach().float()))
        return out

    def check(self) -> None:
        """Before the window's optimizer step: was every loss of the window ``c / count``, and ``c`` the sum?"""
        if self.count is None or not self.returned:
            return
        total = torch.stack(self.returned).sum()
        grad = self.count.grad
        from_grad = -self.count.detach() * grad if grad is not None else torch.zeros_like(total)
        gap = (total - from_grad).abs() / total.abs().clamp(min=1e-12)
        if not float(gap) <= 1e-4 and float(total.abs()) > 0:
            raise GradguardError(
                f"{self.name} ({self.path}:{self.line}) did not return a loss divided by its num_items_in_batch in "
                f"window {self.window} (the window's losses sum to {float(total):.6g}; as c / num_items_in_batch they "
                f"would be {float(from_grad):.6g}): its objective is not a token sum over the window's count, which is "
                "what exact() makes exact; nothing was updated in this window. Return the loss summed over target "
                "tokens divided by num_items_in_batch (check it with check_trainer), or train without exact()"
            )
        if self.sums:
            count = float(self.count.detach())
            world = self.trainer.args.world_size
            for i, (got, ce) in enumerate(self.sums):
                want = world * float(ce) / max(count, 1.0)
                if abs(float(got) - want) > 1e-4 * max(abs(want), 1e-12):
                    raise GradguardError(
                        f"{self.name} ({self.path}:{self.line}) returned {float(got):.6g} on micro-batch {i + 1} "
                        f"of the first window, not the cross entropy summed over the labels != -100"
                        f"{' after the first position' if self.shifted else ''} divided by num_items_in_batch="
                        f"{count:.0f}{f' times {world} processes' if world > 1 else ''} ({want:.6g}): its loss is "
                        "not the token mean exact() makes exact (another reduction, weighting or target set); nothing "
                        "was updated. Train without exact(), and check the trainer with check_trainer"
                    )
            self.sums = []
        self.count = None


class _WindowCheck(TrainerCallback):
    """Runs :meth:`_ExactOverride.check` after the window's last backward, before its optimizer step."""

    def __init__(self, fix: _ExactOverride) -> None:
        self.fix = fix

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self.fix.check()


def _smoother_shifts(trainer, model) -> bool:
    """Whether ``Trainer.compute_loss`` shifts the labels for its label smoother on ``model``.

    Read as the Trainer reads it: through the accelerator's wrappers and a PEFT model to the model underneath,
    whose class transformers registers as a causal LM or not.
    """
    return _underneath(trainer, model)._get_name() in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values()


def _logits(outputs):
    if hasattr(outputs, "keys") and "logits" in outputs.keys():
        return outputs["logits"]
    raise GradguardError(
        f"the model returned {type(outputs).__name__} without 'logits' (keys: "
        f"{list(outputs.keys()) if hasattr(outputs, 'keys') else 'none'}): exact() computes the loss from the logits; "
        "return a dict or ModelOutput with 'logits'"
    )


def _own_loss(outputs):
    if hasattr(outputs, "keys"):
        return outputs["loss"] if "loss" in outputs.keys() else None
    return outputs[0] if isinstance(outputs, (tuple, list)) and outputs else None


def _mean_ce(logits, labels):
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1).to(logits.device),
                           ignore_index=IGNORE)


def _source_of(fn):
    try:
        return inspect.getsourcefile(fn), inspect.getsourcelines(fn)[1]
    except (OSError, TypeError):
        return "<unknown file>", "?"


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
        self._count = None

    @property
    def findings(self):
        return self._fw.findings

    def on_train_begin(self, args, state, control, **kwargs):
        trainer = _calling_trainer()
        site = (None, None)
        if trainer is not None and type(trainer).compute_loss is not Trainer.compute_loss:
            site = loss_line(type(trainer).compute_loss)
        # The Trainer runs every micro-batch of a window into its step: a discard there is never deliberate.
        self._fw.start(site, [kwargs.get("optimizer")], windowed=True)
        if trainer is not None and _CountCheck.applies(trainer):
            self._count = _CountCheck(trainer, self._fw)

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        if self._count is not None:
            self._count.judge(state.global_step + 1)

    def on_train_end(self, args, state, control, **kwargs):
        self._leave()
        self._fw.stop()

    def close(self) -> None:
        """Leave the watch now (after ``train()`` raised: the Trainer has no callback for that)."""
        self._leave()
        self._fw.stop(RuntimeError("train() did not finish"))

    def _leave(self) -> None:
        if self._count is not None:
            self._count.remove()
            self._count = None


class _CountCheck:
    """GG105 for the stock Trainer's count: does ``num_items_in_batch`` count the targets the model's loss sums?

    The Trainer passes the model the window's count of labels != -100 (after the first position only when the
    model's ``loss_type`` is the causal-LM one); the model divides its token sum by it. A causal LM whose
    ``loss_type`` is unset (GPT2) sums the shifted targets, so every row whose first label is a target is
    counted one too many: the window's tokens weigh 1/count instead of 1/(their number). Whether the loss
    shifts is read once from the model's own loss on the first micro-batch (one cross entropy of its logits,
    without grad); then per window the targets are counted from the labels the Trainer's ``get_batch_samples``
    hands out (one host read per window, only while the watch runs).
    """

    @staticmethod
    def applies(trainer) -> bool:
        # Only where the model's own loss divides by the Trainer's count, in one process (the count of other
        # processes' targets is not seen here).
        return (type(trainer).compute_loss is Trainer.compute_loss and trainer.compute_loss_func is None
                and trainer.label_smoother is None and bool(trainer.model_accepts_loss_kwargs)
                and trainer.args.world_size == 1 and "get_batch_samples" not in trainer.__dict__)

    def __init__(self, trainer, fw: FrameworkWatch) -> None:
        self.trainer, self.fw = trainer, fw
        self.shifted: Optional[bool] = None
        self.window = None  # (labels of each micro-batch, num_items_in_batch) of the window in flight
        self.reported = False
        original = trainer.get_batch_samples

        def get_batch_samples(epoch_iterator, num_batches, device):
            batches, num_items = original(epoch_iterator, num_batches, device)
            if batches and all("labels" in b for b in batches) and num_items is not None:
                self.window = ([b["labels"] for b in batches], num_items)
            return batches, num_items

        trainer.get_batch_samples = get_batch_samples
        self.hook = trainer.model.register_forward_hook(self._learn, with_kwargs=True)

    def _learn(self, module, args, kwargs, outputs) -> None:
        labels, n = kwargs.get("labels"), kwargs.get("num_items_in_batch")
        if self.shifted is not None or labels is None or n is None or labels.dim() < 2 or not hasattr(outputs, "keys"):
            return
        loss, logits = outputs.get("loss"), outputs.get("logits")
        if loss is None or logits is None or logits.shape[:-1] != labels.shape:
            return
        with torch.no_grad():
            value = float(loss) * float(n)  # the token sum the model divided by the count
            plain = _sum_ce(logits, labels)
            shift = _sum_ce(logits[..., :-1, :], labels[..., 1:])
        self.shifted = abs(value - shift) < abs(value - plain)
        self.hook.remove()

    def judge(self, step: int) -> None:
        window, self.window = self.window, None
        if window is None or self.shifted is None or self.reported:
            return
        labels, num_items = window
        counted = int(sum(int(((lb[..., 1:] if self.shifted else lb) != IGNORE).sum()) for lb in labels))
        given = int(num_items)
        if counted == given:
            return
        self.reported = True
        model = _underneath(self.trainer, self.trainer.model)._get_name()
        shift = " after the first position of each row" if self.shifted else ""
        self.fw.report("GG105", (
            f"the Trainer passed num_items_in_batch={given} to {model}'s loss, which sums over the {counted} labels "
            f"!= -100{shift} of the window: every token weighs 1/{given} instead of 1/{counted}, so the step's "
            f"gradient is {counted}/{given} of the full-batch mean"
            + (f" ({model}'s loss_type is unset, so the Trainer counts every label though the loss shifts them: set "
               "model.loss_type = 'ForCausalLM' before building the Trainer, or call " + _EXACT_FIX + ")"
               if self.shifted and getattr(_underneath(self.trainer, self.trainer.model), "loss_type", None) is None
               else f". Fix: {_EXACT_FIX}")
        ), step)

    def remove(self) -> None:
        self.hook.remove()
        self.trainer.__dict__.pop("get_batch_samples", None)


def _calling_trainer() -> Optional[Trainer]:
    # A TrainerCallback is not handed the Trainer; the Trainer calling it is on the stack.
    frame = sys._getframe(1)
    while frame is not None:
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, Trainer):
            return candidate
        frame = frame.f_back
    return None

