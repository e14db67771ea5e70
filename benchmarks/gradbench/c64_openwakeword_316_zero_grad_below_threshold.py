"""openWakeWord train.py: batches below the sample threshold are back-propagated, then cleared by the next iteration's zero_grad.

source: dscripka/openWakeWord#316 (https://github.com/dscripka/openWakeWord/issues/316), "Gradient Accumulation is wrong": "when accumulated_samples < 128, loss is cleared in next iteration by self.optimizer.zero_grad()" (train.py line 486; open, the mechanism is checked by running it here)
family: misplaced-clear
shape: for each batch: self.optimizer.zero_grad(); loss = ...; loss.backward(); accumulated_samples += n; if accumulated_samples >= 128: self.optimizer.step(); accumulated_samples = 0
numeric: only the batch that crosses the threshold is applied; the earlier batches of each would-be window are discarded
watch: GG102
lint: GG102
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class Model:
    def __init__(self):
        self.model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-3)

    def train_model(self, batches, min_samples=128):
        accumulated_samples = 0
        for x, y in batches:
            self.optimizer.zero_grad()  # BUG
            loss = F.binary_cross_entropy_with_logits(self.model(x), y) * len(x) / min_samples
            loss.backward()
            accumulated_samples += len(x)
            if accumulated_samples >= min_samples:
                self.optimizer.step()
                # FIX: self.optimizer.zero_grad()
                accumulated_samples = 0


_gb.setup()
m = Model()
_gb.start(m.model)
m.train_model([(torch.randn(64, 8), torch.randint(0, 2, (64, 1)).float()) for _ in range(8)])
_gb.done(m.model)
