"""AllenNLP GradientDescentTrainer with `use_amp`: the loss is scaled by the GradScaler before `backward()`, and the trainer's gradient clipping (`rescale_gradients`) then runs on the still-scaled gradients before `scaler.step(optimizer)` unscales them, so the clip threshold acts on gradients scale times too large (and nearly always clips, by the wrong factor).

source: allenai/allennlp#5426 (https://github.com/allenai/allennlp/pull/5426), "fix a bug when using fp16 training & gradient clipping": "A bug that incorrectly clips scaled gradients when we use mixed-precision training and gradient clipping at the same time. So I modify the logic of gradient clipping. (see also #5413)". The maintainer (epwalsh): "This looks great other than the minor formatting issues!" The trainer was not read: the batch step is written as the description has it (self._scaler.scale(loss).backward(); grad_norm = clip_grad_norm_(parameters, grad_norm); self._scaler.step(self.optimizer); self._scaler.update()); the model is reduced to an MLP classifier; the scaler is an enabled CPU GradScaler (scale 65536), grad_norm 5.0. The twin calls self._scaler.unscale_(self.optimizer) before clipping, what the pull request does
family: clip-before-unscale
shape: Adam(lr=1e-3), grad_norm = 5.0, GradScaler("cpu", init_scale=2**16); 6 batches of 16
numeric: every step's gradient is clipped to 5 / 65536 of its norm's scale (the twin clips only the steps whose norm exceeds 5)
watch: GG112
lint: GG112
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class Trainer:
    def __init__(self, model, grad_norm=5.0):
        self.model = model
        self.optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        self._scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 16)
        self._grad_norm = grad_norm

    def rescale_gradients(self):
        parameters = [p for p in self.model.parameters() if p.grad is not None]
        return torch.nn.utils.clip_grad_norm_(parameters, self._grad_norm)

    def batch_step(self, batch):
        self.optimizer.zero_grad()
        loss = F.cross_entropy(self.model(batch[0]), batch[1])
        self._scaler.scale(loss).backward()
        # FIX: self._scaler.unscale_(self.optimizer)
        self.rescale_gradients()
        self._scaler.step(self.optimizer)
        self._scaler.update()
        return loss.item()


_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(40, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
_gb.start(model)
trainer = Trainer(model)
for i in range(6):
    trainer.batch_step((4 * torch.randn(16, 40), torch.randint(0, 10, (16,))))
_gb.done(model)
