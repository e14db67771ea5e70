"""GaLore torchrun_main.py (per-layer optimizer): each parameter's post-accumulate-grad hook calls its own optimizer's `step()`, `zero_grad()` and scheduler step on every backward pass, so with `gradient_accumulation = 4` one logical update becomes four Adam updates on quarter-scaled micro-batch losses.

source: jiaweizzhao/GaLore#78 (https://github.com/jiaweizzhao/GaLore/issues/78), "[Bug] Per-layer optimizers step on every backward, ignoring gradient accumulation": "With galore_adamw8bit_per_layer, the per-parameter hook calls optimizer.step(), zero_grad() and scheduler.step() on every microbatch, before the outer loop reaches its accumulation boundary: def optimizer_hook(p): ... optimizer_dict[p].step(); optimizer_dict[p].zero_grad(); scheduler_dict[p].step(). With gradient_accumulation=4, one logical update becomes four Adam updates on quarter-scaled losses. Dividing each loss by 4 does not make four Adam steps equal to one step on the summed gradient." (commit 2cc66f88). The issue is open. The code was not read beyond the quoted hook: the LLaMA model is reduced to a small MLP language model, GaLoreAdamW8bit to torch's AdamW (the projection plays no part in the mechanism), the scheduler left out. The twin steps in the hook only on the micro-batch that closes the window, the behaviour the issue expects
family: misplaced-step
shape: AdamW(lr=1e-3) per parameter, hooks via register_post_accumulate_grad_hook; gradient_accumulation = 4; 3 windows of 4 micro-batches, loss = loss / gradient_accumulation
numeric: every window applies four Adam steps on quarter windows instead of one step on the window's mean gradient
watch: GG111
lint: out: the steps run in a post-accumulate-grad hook registered on each parameter; which backward pass a hook's step closes is run-time behaviour
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

gradient_accumulation = 4
vocab = 32


class LM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, 16)
        self.hidden = torch.nn.Linear(16, 16)
        self.head = torch.nn.Linear(16, vocab)

    def forward(self, idx):
        return self.head(torch.tanh(self.hidden(self.emb(idx))))


_gb.setup()
model = LM()
_gb.start(model)
optimizer_dict = {p: torch.optim.AdamW([p], lr=1e-3) for p in model.parameters()}
state = {"closing": False}


def optimizer_hook(p):
    if p.grad is None:
        return
    # FIX: if not state["closing"]:
    # FIX:     return
    optimizer_dict[p].step()
    optimizer_dict[p].zero_grad()


for p in model.parameters():
    p.register_post_accumulate_grad_hook(optimizer_hook)

seqs = torch.randint(0, vocab, (12, 4, 9))
for update_step in range(3):
    for micro in range(gradient_accumulation):
        batch = seqs[update_step * gradient_accumulation + micro]
        state["closing"] = micro == gradient_accumulation - 1
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, vocab), batch[:, 1:].reshape(-1))
        loss = loss / gradient_accumulation
        loss.backward()
_gb.done(model)
