"""run_openai_gpt.py: the fine-tuning loop steps without ever zeroing the gradients.

source: huggingface/transformers#340 (https://github.com/huggingface/transformers/issues/340), "optimizer.zero_grad() in run_openai_gpt.py?"; thomwolf: "Oh that's a mistake indeed ... Fixed on master"
family: missing-clear
shape: for step, batch in enumerate(tqdm_bar): losses = model(input_ids, mc_token_ids, lm_labels, mc_labels); loss = args.lm_coef * losses[0] + losses[1]; loss.backward(); optimizer.step() (no zero_grad)
numeric: update N moves along the sum of all N gradients so far
watch: GG101
lint: GG101
bug-step: 2
"""
import torch
import torch.nn.functional as F

import _gb


class DoubleHeads(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(6, 12)
        self.lm = torch.nn.Linear(12, 6)
        self.mc = torch.nn.Linear(12, 2)

    def forward(self, x, lm_labels, mc_labels):
        h = torch.tanh(self.body(x))
        return F.cross_entropy(self.lm(h), lm_labels), F.cross_entropy(self.mc(h), mc_labels)


_gb.setup()
model = DoubleHeads()
_gb.start(model)
optimizer = torch.optim.Adam(model.parameters(), lr=6.25e-3)
lm_coef = 0.9
for step in range(5):
    x = torch.randn(8, 6)
    losses = model(x, x.argmax(-1), (x[:, 0] > 0).long())
    loss = lm_coef * losses[0] + losses[1]
    loss.backward()
    optimizer.step()
    # FIX: optimizer.zero_grad()
_gb.done(model)
