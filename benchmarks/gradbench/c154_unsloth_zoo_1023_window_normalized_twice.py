"""unsloth-zoo `_unsloth_get_batch_samples`: a window's token count `num_items_in_batch` is returned even when the model does not take loss kwargs, so the fused cross-entropy divides each micro-batch's summed loss by the window's token count and `Trainer.training_step` also divides it by the accumulation steps: every window's loss and gradient are scaled by 1/GA twice.

source: unslothai/unsloth-zoo#1023 (https://github.com/unslothai/unsloth-zoo/pull/1023), "Reconcile grad-accum loss normalization in _unsloth_get_batch_samples" (merged). The change's comment: "We decide num_items_in_batch from the forward signature, but training_step divides by grad-accum based on self.model_accepts_loss_kwargs. Returning a count while that flag is False normalises the loss twice (TRL's chunked_nll and our fused CE both divide by it), silently scaling loss and grads by 1/GA. Mirror stock Trainer._get_num_items_in_batch: only count when someone will consume it." The fix returns None for num_items_in_batch in that case (each loss then falls back to its mean). The trainer is reduced to the two lines that matter: the loss function (sum over tokens / num_items_in_batch when it is given, else the mean) and training_step's `if not model_accepts_loss_kwargs: loss = loss / gradient_accumulation_steps`; the model to a small MLP language model. The twin passes None, as the fix does
family: overscaled
shape: SGD(lr=0.5, momentum=0.9); gradient_accumulation_steps = 4, micro-batches of 4 sequences of 8 tokens (all counted), 3 windows; model_accepts_loss_kwargs = False
numeric: every window's gradient is 1/4 of the full-batch mean gradient
watch: GG113
lint: GG113
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

gradient_accumulation_steps = 4
vocab = 24
model_accepts_loss_kwargs = False


class LM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, 16)
        self.head = torch.nn.Linear(16, vocab)

    def forward(self, idx):
        return self.head(torch.tanh(self.emb(idx)))


def fused_ce(logits, labels, num_items_in_batch=None):
    loss = F.cross_entropy(logits.reshape(-1, vocab), labels.reshape(-1), reduction="sum")
    if num_items_in_batch is None:
        return loss / labels.numel()
    return loss / num_items_in_batch


def get_batch_samples(window):
    num_items_in_batch = sum(b[:, 1:].numel() for b in window)
    # FIX: num_items_in_batch = None if not model_accepts_loss_kwargs else num_items_in_batch
    return window, num_items_in_batch


_gb.setup()
model = LM()
_gb.start(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
data = torch.randint(0, vocab, (12, 4, 9))
for update in range(3):
    window, num_items_in_batch = get_batch_samples(list(data[update * 4:(update + 1) * 4]))
    for batch in window:
        loss = fused_ce(model(batch[:, :-1]), batch[:, 1:], num_items_in_batch)
        if not model_accepts_loss_kwargs:
            loss = loss / gradient_accumulation_steps
        loss.backward()
    optimizer.step()
    optimizer.zero_grad()
_gb.done(model)
