"""EveryDream2 trainer: --clip_grad_scale applied to the gradients while the AMP scaler's scale is still in them.

source: victorchall/EveryDream2trainer#175 (https://github.com/victorchall/EveryDream2trainer/pull/175), "correctly apply clip_grad_scale to unscaled gradients": with AMP "you have to pass values like 1e5 or 1e6 for clip_grad_scale ... rather than the common/expected 1.0 ... (instead of effectively halting training)" (merged)
family: clip-before-unscale
shape: self.scaler.scale(loss).backward(); if self.clip_grad_norm is not None: torch.nn.utils.clip_grad_norm_(parameters=self.text_encoder.parameters(), max_norm=...) and the same for the unet; then (on the accumulation boundary) self.scaler.step(self.optimizer_unet); self.scaler.update()
numeric: with clip 1.0 the clipped gradient is about 1/65536 of the intended one: "effectively halting training"
watch: GG112
lint: GG112
bug-step: 1
"""
import torch

import _gb


class EveryDreamOptimizer:
    def __init__(self, text_encoder, unet, clip_grad_norm=1.0):
        self.text_encoder, self.unet = text_encoder, unet
        self.optimizer = torch.optim.AdamW(list(text_encoder.parameters()) + list(unet.parameters()), lr=1e-3)
        self.scaler = torch.amp.GradScaler("cpu")
        self.clip_grad_norm = clip_grad_norm

    def step(self, loss):
        self.scaler.scale(loss).backward()
        # FIX: self.scaler.unscale_(self.optimizer)
        if self.clip_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(parameters=self.text_encoder.parameters(), max_norm=self.clip_grad_norm)
            torch.nn.utils.clip_grad_norm_(parameters=self.unet.parameters(), max_norm=self.clip_grad_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)


_gb.setup()
text_encoder = torch.nn.Sequential(torch.nn.Embedding(12, 6), torch.nn.Flatten(), torch.nn.Linear(18, 8))
unet = torch.nn.Sequential(torch.nn.Linear(8 + 4, 16), torch.nn.SiLU(), torch.nn.Linear(16, 4))
_gb.start(text_encoder, unet)
ed = EveryDreamOptimizer(text_encoder, unet)
for _ in range(5):
    tokens, latents = torch.randint(0, 12, (4, 3)), torch.randn(4, 4)
    noise = torch.randn_like(latents)
    pred = unet(torch.cat([text_encoder(tokens), latents + noise], -1))
    ed.step(torch.nn.functional.mse_loss(pred, noise))
_gb.done(text_encoder, unet)
