# mutation: skip drop-last-window (train() asserts len(self._dataloader) % self._gradient_accumulation_steps == 0: the last-batch term never adds a step)
"""torchtune-style single-device recipe: per-token loss, accumulation over _gradient_accumulation_steps."""
import torch


class FullFinetuneRecipeSingleDevice:
    def __init__(self, cfg, model, optimizer, loss_fn, dataloader, lr_scheduler=None):
        self._gradient_accumulation_steps = cfg.gradient_accumulation_steps
        self._clip_grad_norm = cfg.get("clip_grad_norm", None)
        self._model = model
        self._optimizer = optimizer
        self._loss_fn = loss_fn
        self._dataloader = dataloader
        self._lr_scheduler = lr_scheduler
        self.total_epochs = cfg.epochs
        self.global_step = 0

    def _loss_step(self, batch):
        labels = batch.pop("labels")
        logits = self._model(**batch)
        labels = torch.hstack((labels[..., 1:], torch.full_like(labels[..., :1], -100)))
        return self._loss_fn(logits.reshape(-1, logits.size(-1)), labels.reshape(-1))

    def train(self):
        assert len(self._dataloader) % self._gradient_accumulation_steps == 0  # whole windows only
        self._optimizer.zero_grad()
        running_loss = 0
        for curr_epoch in range(self.total_epochs):
            for idx, batch in enumerate(self._dataloader):
                current_loss = self._loss_step(batch) / self._gradient_accumulation_steps
                running_loss += current_loss.detach()
                current_loss.backward()
                if (idx + 1) % self._gradient_accumulation_steps == 0 or idx + 1 == len(self._dataloader):
                    if self._clip_grad_norm is not None:
                        torch.nn.utils.clip_grad_norm_(self._model.parameters(), max_norm=float(self._clip_grad_norm))
                    self._optimizer.step()
                    self._optimizer.zero_grad(set_to_none=True)
                    if self._lr_scheduler is not None:
                        self._lr_scheduler.step()
                    self.global_step += 1
                    loss_to_log = running_loss.item()
                    print(f"{curr_epoch + 1}|{self.global_step}|Loss: {loss_to_log}")
                    running_loss = 0
