"""A tiny causal LM over synthetic variable-length sequences: ``gradguard plan``'s example model.

Everything is generated here (no download): token sequences from a fixed random
Markov chain, of random lengths, padded to a common length with targets set to
``IGNORE_INDEX`` on the padding. The loss is token-mean cross-entropy, so each
micro-batch averages over a different number of tokens: the case where
dividing by the number of micro-batches is wrong.
"""

from __future__ import annotations

import math
from typing import List, Tuple

import torch
from torch import nn
from torch.nn import functional as F

IGNORE_INDEX = -100


class TinyCausalLM(nn.Module):
    """Embedding, one causal self-attention block, an MLP, and a weight-tied LM head.

    >>> model = TinyCausalLM(vocab=16, dim=8, max_len=12)
    >>> model(torch.zeros(2, 5, dtype=torch.long)).shape
    torch.Size([2, 5, 16])
    """

    def __init__(self, vocab: int = 48, dim: int = 32, heads: int = 2, max_len: int = 40) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(max_len, dim)
        self.ln1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.tok.weight  # weight tying: gradient arrives along two paths and is summed
        # Small embeddings (GPT-2's 0.02) so the tied head starts near uniform logits.
        nn.init.normal_(self.tok.weight, std=0.02)
        nn.init.normal_(self.pos.weight, std=0.02)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        t = tokens.shape[1]
        h = self.tok(tokens) + self.pos(torch.arange(t, device=tokens.device))
        causal = torch.ones(t, t, dtype=torch.bool, device=tokens.device).triu(1)
        a = self.ln1(h)
        h = h + self.attn(a, a, a, attn_mask=causal, need_weights=False)[0]
        h = h + self.mlp(self.ln2(h))
        return self.head(self.ln_f(h))


def lm_loss(model: nn.Module, batch: Tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Token-mean cross-entropy over the non-ignored targets of ``batch = (inputs, targets)``."""
    inputs, targets = batch
    logits = model(inputs)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE_INDEX)


def token_count(batch: Tuple[torch.Tensor, torch.Tensor]) -> int:
    """Items the loss averages over: the non-ignored target tokens."""
    return int((batch[1] != IGNORE_INDEX).sum())


def make_sequences(n: int, *, vocab: int = 48, min_len: int = 3, max_len: int = 40, seed: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
    """``n`` padded sequences from a fixed sparse Markov chain, as ``(inputs, targets)``.

    Lengths are drawn from a wide distribution so that token counts differ a lot
    between sequences (as in real variable-length text).
    """
    # One fixed, peaked transition matrix (the "language"); ``seed`` only picks the samples.
    chain = torch.Generator().manual_seed(1234)
    probs = torch.softmax(torch.randn(vocab, vocab, generator=chain) * 3.0, dim=-1)
    g = torch.Generator().manual_seed(seed)
    inputs = torch.zeros(n, max_len - 1, dtype=torch.long)
    targets = torch.full((n, max_len - 1), IGNORE_INDEX, dtype=torch.long)
    for i in range(n):
        # Log-uniform lengths: many short sequences and a few long ones.
        length = int(math.exp(torch.empty(()).uniform_(math.log(min_len), math.log(max_len), generator=g)))
        length = max(min_len, min(max_len, length))
        seq = [int(torch.randint(vocab, (1,), generator=g))]
        for _ in range(length - 1):
            seq.append(int(torch.multinomial(probs[seq[-1]], 1, generator=g)))
        seq_t = torch.tensor(seq)
        inputs[i, : length - 1] = seq_t[:-1]
        targets[i, : length - 1] = seq_t[1:]
    return inputs, targets


def split(batch: Tuple[torch.Tensor, torch.Tensor], size: int) -> List[Tuple[torch.Tensor, torch.Tensor]]:
    """Consecutive micro-batches of ``size`` sequences (the last may be smaller)."""
    inputs, targets = batch
    return [(inputs[i : i + size], targets[i : i + size]) for i in range(0, inputs.shape[0], size)]


def plan_factory():
    """The model, loss and an example batch for ``gradguard plan gradguard.demo.model:plan_factory``."""
    batch = make_sequences(64, seed=1)
    return TinyCausalLM(), lm_loss, batch
