"""pytorch-openai-transformer-lm's ROCStories fine-tuning script: the optimizer (OpenAIAdam) is built on `model.parameters()`, the pre-trained transformer's, while the new task-specific classification head `clf_head` is a separate module, so the head receives gradients but is in no optimizer and keeps its random initialisation.

source: huggingface/pytorch-openai-transformer-lm#6 (https://github.com/huggingface/pytorch-openai-transformer-lm/pull/6), "fix the scope of optimizer" (merged): "The target of an optimizer should contain `clf_head` (new task-specific output matrix) in addition to `model` (Transformer encoder). The code might fail to do that, right?" The maintainer (thomwolf): "You are right! Thanks a lot!!" train.py was not read: the script is written with the two modules the pull request names; the transformer is reduced to an embedding and an MLP encoder over 6 tokens, OpenAIAdam to Adam. The twin gives the optimizer both modules' parameters, the pull request's fix
family: orphan
shape: Adam(lr=6.25e-4); 6 steps on batches of 8
numeric: the classification head never moves
watch: GG106
lint: out: which modules feed the loss is known only when the model runs
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class TransformerModel(torch.nn.Module):
    def __init__(self, vocab=50, n_embd=16):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, n_embd)
        self.h = torch.nn.Sequential(torch.nn.Linear(n_embd, n_embd), torch.nn.GELU(), torch.nn.Linear(n_embd, n_embd))

    def forward(self, tokens):
        return self.h(self.embed(tokens))


_gb.setup()
data = [(torch.randint(0, 50, (8, 6)), torch.randint(0, 2, (8,))) for _ in range(6)]
model = TransformerModel()
clf_head = torch.nn.Linear(16, 2)
_gb.start(model, clf_head)
model_opt = torch.optim.Adam(model.parameters(), lr=6.25e-4)  # BUG
# FIX: model_opt = torch.optim.Adam(list(model.parameters()) + list(clf_head.parameters()), lr=6.25e-4)
for tokens, labels in data:
    model_opt.zero_grad()
    h = model(tokens)
    clf_logits = clf_head(h[:, -1])
    F.cross_entropy(clf_logits, labels).backward()
    model_opt.step()
_gb.done(model, clf_head)
