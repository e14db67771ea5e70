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

from .. import require

require("transformers", "transformers")

# Each job in its own module; the names users import stay here.
from .check import TrainerCheck, check_trainer  # noqa: E402
from .exact import exact  # noqa: E402
from .watch import Watch  # noqa: E402

__all__ = ["check_trainer", "exact", "TrainerCheck", "Watch"]
