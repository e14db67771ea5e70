"""TorchSSL FixMatch-style loop: gradients clipped under AMP before they are unscaled.

source: TorchSSL/TorchSSL#59 (https://github.com/TorchSSL/TorchSSL/pull/59), "fix bug in gradient clipping": "In automatic mixed precision, we should unscale all gradients before clip them"
family: clip-before-unscale
shape: if self.use_amp: scaler.scale(total_loss).backward(); if args.clip > 0: torch.nn.utils.clip_grad_norm_(self.model.parameters(), args.clip); scaler.step(self.optimizer); scaler.update(); else: total_loss.backward() ...
numeric: with args.clip = 1.0 the supervised + unsupervised gradient is clipped to about 1/65536 of the clip norm
watch: GG112
lint: GG112
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class FixMatch:
    def __init__(self, use_amp=True, clip=1.0):
        self.model = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.ReLU(), torch.nn.Linear(12, 3))
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.03, momentum=0.9, nesterov=True)
        self.use_amp, self.clip = use_amp, clip

    def train(self, batches):
        scaler = torch.amp.GradScaler("cpu")
        for x_lb, y_lb, x_ulb_w, x_ulb_s in batches:
            logits = self.model(torch.cat((x_lb, x_ulb_w, x_ulb_s)))
            n = len(x_lb)
            sup_loss = F.cross_entropy(logits[:n], y_lb)
            w, s = logits[n:].chunk(2)
            pseudo = w.detach().softmax(-1).argmax(-1)
            unsup_loss = F.cross_entropy(s, pseudo)
            total_loss = sup_loss + unsup_loss
            if self.use_amp:
                scaler.scale(total_loss).backward()
                # FIX: scaler.unscale_(self.optimizer)
                if self.clip > 0:
                    torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
                scaler.step(self.optimizer)
                scaler.update()
            else:
                total_loss.backward()
                if self.clip > 0:
                    torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
                self.optimizer.step()
            self.model.zero_grad()


_gb.setup()
algo = FixMatch()
_gb.start(algo.model)
algo.train([(torch.randn(4, 6), torch.randint(0, 3, (4,)), torch.randn(8, 6), torch.randn(8, 6)) for _ in range(5)])
_gb.done(algo.model)
