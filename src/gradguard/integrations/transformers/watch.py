"""Watch: the run-time watch (gradguard.watch) during an HF Trainer's train(), with the Trainer's own advice."""

from __future__ import annotations

import sys
from typing import Optional

import torch
from transformers import Trainer, TrainerCallback

from .._watch import FrameworkWatch, loss_line
from ._common import IGNORE, _EXACT_FIX, _sum_ce, _underneath

__all__ = ["Watch"]


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
