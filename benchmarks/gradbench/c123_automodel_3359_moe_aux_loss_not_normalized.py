"""NeMo Automodel MoE recipes: the language-model loss is normalised over the whole accumulation window, but the model's auxiliary (load-balancing) loss is added to every micro-batch's backward unnormalised, so its gradient is M times too large with M micro-batches.

source: NVIDIA-NeMo/Automodel#3359 (https://github.com/NVIDIA-NeMo/Automodel/pull/3359), "fix: normalize MoE auxiliary loss during gradient accumulation" (merged): "The language-model loss was normalized for the effective global batch, but each model-provided MoE auxiliary loss entered every microbatch backward pass without the matching accumulation normalization. With M gradient-accumulation microbatches this over-weighted the auxiliary gradient". The pre-fix recipe lines were not read; the shape is the one the PR describes (token-sum cross-entropy divided by the window's label-token count, plus the model's aux loss). The MoE is reduced to a 2-expert layer with a softmax router and a Switch-style balance loss; the twin divides the aux loss by the number of micro-batches (single rank: no context/pipeline factors)
family: overscaled-term
shape: for step: num_label_tokens = sum((mb["labels"] != -100).sum() for mb in micro_batches); for mb in micro_batches: logits, aux_loss = model(mb["input_ids"]); loss = F.cross_entropy(logits, mb["labels"], ignore_index=-100, reduction="sum") / num_label_tokens; (loss + aux_loss).backward(); then clip_grad_norm_(…, 1.0); optimizer.step(); optimizer.zero_grad(). M = 4 micro-batches per step, aux coefficient 0.01, AdamW
numeric: the router's balance gradient in every step is 4 times its intended weight
watch: out: the window's main loss is normalised over the window; only an added term is not, and a backward pass carries the sum (the rules cannot separate the terms)
lint: out: the added term is the model's own output; whether it was normalised elsewhere is not in the loop's text
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class TinyMoE(torch.nn.Module):
    def __init__(self, d=12, vocab=7, aux_coef=0.01):
        super().__init__()
        self.embed = torch.nn.Linear(d, d)
        self.router = torch.nn.Linear(d, 2)
        self.experts = torch.nn.ModuleList([torch.nn.Linear(d, d) for _ in range(2)])
        self.lm_head = torch.nn.Linear(d, vocab)
        self.aux_coef = aux_coef

    def forward(self, input_ids):
        h = torch.tanh(self.embed(input_ids))
        probs = F.softmax(self.router(h), dim=-1)
        h = h + sum(probs[..., e:e + 1] * torch.tanh(expert(h)) for e, expert in enumerate(self.experts))
        frac = F.one_hot(probs.argmax(-1), 2).to(h.dtype).mean(0)
        aux_loss = self.aux_coef * 2 * (frac * probs.mean(0)).sum() * 10  # balance loss (scaled up for a toy router)
        return self.lm_head(h), aux_loss


_gb.setup()
model = TinyMoE()
_gb.start(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
M = 4
for step in range(3):
    micro_batches = []
    for _ in range(M):
        x = torch.randn(10, 12)
        labels = x[:, :7].argmax(1)
        labels[torch.rand(10) < 0.3] = -100
        micro_batches.append({"input_ids": x, "labels": labels})
    num_label_tokens = sum(int((mb["labels"] != -100).sum()) for mb in micro_batches)
    for mb in micro_batches:
        logits, aux_loss = model(mb["input_ids"])
        loss = F.cross_entropy(logits, mb["labels"], ignore_index=-100, reduction="sum") / num_label_tokens
        (loss + aux_loss).backward()  # BUG
        # FIX: (loss + aux_loss / M).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad()
_gb.done(model)
