"""check_trainer: is an HF Trainer's accumulated gradient the full-batch one? Measured on its own window."""

from __future__ import annotations

import copy
import random
from typing import List, Optional

import torch
import torch.nn.functional as F
from transformers import Trainer

from ..._errors import GradguardError
from ._common import (IGNORE, _EXACT_FIX, _logits, _mean_ce, _own_loss, _smoother_shifts, _sum_ce,
                      _underneath)

__all__ = ["check_trainer", "TrainerCheck"]


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
