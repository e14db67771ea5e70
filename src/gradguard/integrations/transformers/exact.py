"""exact(trainer): the HF Trainer's window gradient made the full-batch token-mean one, checked every window."""

from __future__ import annotations

import inspect
from typing import Optional

import torch
import torch.nn.functional as F
from transformers import Trainer, TrainerCallback

from ..._errors import GradguardError
from ._common import IGNORE, _logits, _mean_ce, _own_loss, _smoother_shifts

__all__ = ["exact"]


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
    micro-batch with targets tells whether the loss shifts labels. Where the
    model's loss is taken from the log-softmax of the returned logits (its
    autograd graph shows that, through reshapes and a float upcast only), the
    token sum is gathered from those log-probabilities and backpropagated
    through them: one log-softmax per micro-batch, as the stock Trainer.

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
        # The log-softmax of these logits that the model's own loss just computed, where its autograd graph shows
        # one: the token sum below is taken from it (a gather), not from a second pass over the logits.
        logp = _saved_log_probs(own, logits)
        if self.shifted and "shift_labels" not in inputs:
            if logits.shape[:-1] == inputs["labels"].shape:
                # The targets moved, not the logits (as the models' own losses do): slicing the logits would copy
                # them, and their gradient, once per micro-batch (a third of this loss's time on a small LM).
                targets = F.pad(targets, (0, 1), value=self.ignore)
            else:
                logits, logp = logits[..., :-1, :], None
        if logits.dtype in (torch.float16, torch.bfloat16):
            logits = logits.float()  # as the models' own losses and the Trainer's label smoother do
        flat, targets = logits.reshape(-1, logits.shape[-1]), targets.reshape(-1).to(logits.device)
        if logp is not None:
            logp = logp.reshape(flat.shape) if logp.numel() == flat.numel() else None
        kept = targets.ne(self.ignore)
        # A window without any target (all labels ignored) has no direction: a zero loss, not 0/0.
        total = num_items_in_batch.clamp(min=1) if torch.is_tensor(num_items_in_batch) else max(num_items_in_batch, 1)
        if self.smoother is not None or logp is not None:
            if logp is None:
                logp = F.log_softmax(flat, dim=-1)
            nll = -logp.gather(-1, targets.clamp(min=0)[:, None]).squeeze(-1).masked_fill(~kept, 0.0).sum()
            loss = nll / total
            if self.smoother is not None:
                # The Trainer's LabelSmoother, with the count of the targets it sums over.
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




# Autograd nodes that move no value: a log-softmax reached from the logits through these alone is over their rows.
_SAME_VALUES = ("ViewBackward0", "UnsafeViewBackward0", "ReshapeAliasBackward0", "ToCopyBackward0")


def _saved_log_probs(loss, logits):
    """The log-softmax over ``logits``' last dimension that ``loss`` (the model's own) was computed from, or None.

    Read from the loss's autograd graph: a ``LogSoftmaxBackward0`` over the last dimension whose input is
    ``logits`` itself through reshapes and a float upcast only, so its saved result holds the log-probabilities
    of ``logits``' rows in their order (what a second ``log_softmax(logits)`` would compute, in float32 for
    half logits). The tensor returned backpropagates through that node into the logits. None wherever the
    graph shows anything else (another op between, a fused or compiled loss, a torch without the saved
    result): the caller then computes the log-softmax itself. What the model's loss does with these
    log-probabilities (its targets, ignored labels, shift, smoothing, reduction) is not assumed: the caller's
    token sum over its own targets is checked against the loss's value.
    """
    start, end = getattr(loss, "grad_fn", None), logits.grad_fn
    if start is None or end is None:
        return None
    want = torch.float32 if logits.dtype in (torch.float16, torch.bfloat16) else logits.dtype
    seen, stack = set(), [start]
    while stack and len(seen) < 64:  # the loss's own few nodes; never a walk through the model
        node = stack.pop()
        if node is None or node is end or node in seen:
            continue
        seen.add(node)
        if type(node).__name__ != "LogSoftmaxBackward0":
            stack.extend(n for n, _ in node.next_functions)
            continue
        try:
            logp = node._saved_result
            dim = node._saved_dim
            dim = dim - 2 ** 64 if dim >= 2 ** 63 else dim  # a negative dim comes back as its unsigned 64-bit value
        except (AttributeError, RuntimeError):  # an older torch, or the result edited in place since
            return None
        if (logp.dtype != want or logp.numel() != logits.numel() or logp.shape[-1] != logits.shape[-1]
                or dim % logp.dim() != logp.dim() - 1):
            continue
        step = node.next_functions[0] if len(node.next_functions) == 1 else (None, 0)
        copies = 0  # one cast at most: from the logits' dtype to the log-probabilities' (two could round between)
        for _ in range(8):
            fn, nr = step
            if fn is end:
                if nr == logits.output_nr:
                    return logp
                break
            name = type(fn).__name__
            copies += name == "ToCopyBackward0"
            if name not in _SAME_VALUES or copies > 1 or len(fn.next_functions) != 1:
                break
            step = fn.next_functions[0]
    return None


def _source_of(fn):
    try:
        return inspect.getsourcefile(fn), inspect.getsourcelines(fn)[1]
    except (OSError, TypeError):
        return "<unknown file>", "?"
