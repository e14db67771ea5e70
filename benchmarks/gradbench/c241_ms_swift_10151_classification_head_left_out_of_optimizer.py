"""ms-swift fine-tuning a multimodal model for sequence classification with `vit_lr` or `aligner_lr` set: the optimizer's groups are built from the architecture's module prefixes (vision tower, aligner, and the language model's `model.language_model` and `lm_head`), but the classification patch replaces `lm_head` with an identity and adds a new `score` head that matches none of the prefixes, so `score.weight` receives gradients but is in no group and is never updated.

source: modelscope/ms-swift#10151 (https://github.com/modelscope/ms-swift/pull/10151), "fix(train): include all trainable multimodal parameters" (merged): "Setting `vit_lr` or `aligner_lr` can leave a multimodal classification head out of the optimizer. For Qwen2.5-VL, the sequence-classification patch replaces `lm_head` with an identity and adds `score`, while the architecture's language-model prefixes still list `model.language_model` and `lm_head`. `score.weight` receives gradients but never updates." The optimizer builder was not read: the groups are built by name prefix as described; Qwen2.5-VL is reduced to a vision MLP, an aligner, a language MLP, an identity lm_head and a score head. The twin gives every remaining trainable parameter the default learning rate, the pull request's fix
family: orphan
shape: AdamW(lr=1e-4; vit_lr 2e-5, aligner_lr 5e-5); 6 steps on batches of 8
numeric: the classification head never moves
watch: GG106
lint: out: which parameters the name prefixes select is decided by the module names at run time
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class VLForSequenceClassification(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.visual = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.GELU())
        self.aligner = torch.nn.Linear(16, 16)
        self.language_model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.GELU())
        self.lm_head = torch.nn.Identity()
        self.score = torch.nn.Linear(16, 3)

    def forward(self, pixels):
        return self.score(self.lm_head(self.language_model(self.aligner(self.visual(pixels)))))


_gb.setup()
data = [(torch.randn(8, 12), torch.randint(0, 3, (8,))) for _ in range(6)]
model = VLForSequenceClassification()
_gb.start(model)
named = dict(model.named_parameters())
prefixes = {"vit": ("visual.",), "aligner": ("aligner.",), "llm": ("language_model.", "lm_head.")}
groups = [{"params": [p for n, p in named.items() if n.startswith(prefixes["vit"])], "lr": 2e-5},
          {"params": [p for n, p in named.items() if n.startswith(prefixes["aligner"])], "lr": 5e-5},
          {"params": [p for n, p in named.items() if n.startswith(prefixes["llm"])], "lr": 1e-4}]
# FIX: grouped = {id(p) for g in groups for p in g["params"]}
# FIX: groups[2]["params"] += [p for p in named.values() if p.requires_grad and id(p) not in grouped]
optimizer = torch.optim.AdamW(groups, lr=1e-4)
for pixels, labels in data:
    optimizer.zero_grad()
    F.cross_entropy(model(pixels), labels).backward()
    optimizer.step()
_gb.done(model)
