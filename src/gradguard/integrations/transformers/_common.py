"""What the HF Trainer's check, exact() and watch share: the model under the wrappers, its loss and logits."""

from __future__ import annotations

import torch.nn.functional as F
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

try:  # where Trainer.compute_loss takes it from (transformers >= 4.46); before, from transformers.trainer
    from transformers.trainer_utils import _is_peft_model
except ImportError:  # pragma: no cover - older transformers
    from transformers.trainer import _is_peft_model

from ..._errors import GradguardError

IGNORE = -100

_EXACT_FIX = "gradguard.integrations.transformers.exact(trainer) before train()"


def _underneath(trainer, model):
    """The model under the accelerator's wrappers and a PEFT model, as ``Trainer.compute_loss`` reads it."""
    unwrapped = trainer.accelerator.unwrap_model(model)
    return unwrapped.base_model.model if _is_peft_model(unwrapped) else unwrapped


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


def _sum_ce(logits, labels):
    return float(F.cross_entropy(logits.double().reshape(-1, logits.shape[-1]), labels.reshape(-1).to(logits.device),
                                 ignore_index=IGNORE, reduction="sum"))
