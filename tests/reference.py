"""The independent reference for accumulation tests: plain PyTorch, full batch, float64.

Nothing here uses gradguard: the tests compare gradguard against these.
"""

from __future__ import annotations

from typing import List

import torch
from torch import nn
from torch.nn import functional as F

IGNORE = -100


class CaptureOptimizer(torch.optim.Optimizer):
    """An optimizer whose ``step()`` records the gradients it is handed and moves nothing.

    Lets a test read exactly what an optimizer would have applied.
    """

    def __init__(self, params):
        super().__init__(list(params), {})
        self.captured: List[List[torch.Tensor]] = []

    @torch.no_grad()
    def step(self, closure=None):
        self.captured.append([None if p.grad is None else p.grad.detach().clone() for g in self.param_groups for p in g["params"]])


def full_batch_grads(model: nn.Module, loss: torch.Tensor) -> List[torch.Tensor]:
    """Gradients of ``loss`` w.r.t. the model's parameters, without touching ``.grad``."""
    params = list(model.parameters())
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    return [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads)]


def rel_error(got: List[torch.Tensor], want: List[torch.Tensor]) -> float:
    """Largest per-parameter ``max|got - want| / max|want|`` (None read as zeros)."""
    worst = 0.0
    for g, w in zip(got, want):
        g = torch.zeros_like(w) if g is None else g
        scale = w.abs().max().item()
        diff = (g - w).abs().max().item()
        worst = max(worst, diff / scale if scale > 0 else diff)
    return worst


def token_ce(logits: torch.Tensor, targets: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Token-level cross-entropy with ignore_index, as LMs use it."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE, reduction=reduction)


class TiedEmbeddingLM(nn.Module):
    """Embedding -> MLP -> output projection tied to the embedding (gradient arrives along two paths)."""

    def __init__(self, vocab: int = 11, dim: int = 6):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, dim), nn.Tanh())
        self.out = nn.Linear(dim, vocab, bias=False)
        self.out.weight = self.emb.weight

    def forward(self, tokens):
        return self.out(self.mlp(self.emb(tokens)))
