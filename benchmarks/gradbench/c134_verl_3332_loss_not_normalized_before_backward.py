"""verl FSDP SFT trainer: `_compute_loss_and_backward` runs `loss.backward()` on each micro-batch's token-mean loss, and training_step divides by `n_micro_batches` only afterwards (for the logged value), so every step applies the sum of the micro-batch gradients, n_micro_batches times the batch mean, and the clip sees that sum.

source: verl-project/verl#3332 (https://github.com/verl-project/verl/pull/3332, merged), "[trainer] fix: Loss calculations for grad accumulation steps": "For gradient accumulation steps over micro batches, loss should be normalised before calling loss.backwards()"; the same report as verl#2919 ("Check _compute_loss_and_backward implementation: loss = torch.sum(loss) / (valid_token_this_rank + 1e-8) * dp_size; if do_backward: loss.backward(). Before loss.backward(), we should add loss = loss / n_micro_batches") and the earlier verl#436 review thread, which quotes training_step: for micro_batch in micro_batches: loss = self._compute_loss_and_backward(batch=micro_batch) / n_micro_batches; step_loss += loss.item(); then grad_norm = self.fsdp_model.clip_grad_norm_(max_norm=self.config.optim.clip_grad); optimizer.step(). FSDP is replaced by the plain module (dp_size = 1, clip_grad_norm_ from torch), the LLM by a tiny token model with a loss mask. The twin divides before backward, as the merged fix does
family: unscaled
shape: training_step(batch): optimizer.zero_grad(); micro_batches = batch.split(micro_batch_size); n_micro_batches = 4; loop as quoted; clip_grad = 1.0; AdamW(lr=1e-3), 5 steps
numeric: every step's gradient is 4 times the batch mean before the clip at 1.0
watch: GG104
lint: GG104
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class TinyLM(torch.nn.Module):
    def __init__(self, vocab=12):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, 16)
        self.head = torch.nn.Linear(16, vocab)

    def forward(self, input_ids):
        return self.head(torch.tanh(self.emb(input_ids)))


class SFTTrainer:
    def __init__(self, model, optimizer, micro_batch_size=2, clip_grad=1.0):
        self.model, self.optimizer = model, optimizer
        self.micro_batch_size, self.clip_grad = micro_batch_size, clip_grad
        self.dp_size = 1

    def _compute_loss_and_backward(self, batch, do_backward=True, n_micro_batches=1):
        input_ids, labels, loss_mask = batch
        logits = self.model(input_ids)
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="none") * loss_mask.flatten()
        valid_token_this_rank = loss_mask.sum()
        loss = torch.sum(loss) / (valid_token_this_rank + 1e-8) * self.dp_size
        # FIX: loss = loss / n_micro_batches
        if do_backward:
            loss.backward()
        return loss

    def training_step(self, batch):
        self.model.train()
        self.optimizer.zero_grad()
        micro_batches = list(zip(*(t.split(self.micro_batch_size) for t in batch)))
        n_micro_batches = len(micro_batches)
        step_loss = 0
        for micro_batch in micro_batches:
            loss = self._compute_loss_and_backward(batch=micro_batch) / n_micro_batches  # BUG
            # FIX: loss = self._compute_loss_and_backward(batch=micro_batch, n_micro_batches=n_micro_batches)
            step_loss += loss.item()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm=self.clip_grad)
        self.optimizer.step()
        return step_loss, grad_norm


_gb.setup()
model = TinyLM()
_gb.start(model)
trainer = SFTTrainer(model, torch.optim.AdamW(model.parameters(), lr=1e-3))
for _ in range(5):
    ids = torch.randint(0, 12, (8, 6))
    trainer.training_step((ids, ids.roll(-1, 1), torch.ones(8, 6)))
_gb.done(model)
