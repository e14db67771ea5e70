"""Real text with no download: the paragraphs of Python's own documentation.

Every Python installation ships ``pydoc_data.topics``: the text ``help()`` shows
for the language's keywords and topics, a few thousand paragraphs of English
prose and code. Each paragraph becomes one sequence of UTF-8 bytes (a 256-token
vocabulary, no tokenizer to download), cut at ``max_len`` bytes as a tokenizer's
truncation would. The sequences have very different lengths, so micro-batches
hold very different numbers of tokens: the case where dividing each micro-batch's
mean loss by the number of micro-batches is wrong.

The model is a small byte-level causal transformer. Batches are right-padded
with targets set to ``IGNORE_INDEX``; with the causal mask a real token never
sees the padding, so padding changes nothing but the amount of work.
"""

from __future__ import annotations

from typing import List, Sequence, Tuple

import torch
from torch import nn
from torch.nn import functional as F

IGNORE_INDEX = -100
VOCAB = 256  # bytes
Batch = Tuple[torch.Tensor, torch.Tensor]


def paragraphs(*, min_bytes: int = 8, max_len: int = 96) -> List[bytes]:
    """The documentation paragraphs as UTF-8 byte strings, in a fixed order, cut at ``max_len`` bytes.

    >>> paras = paragraphs()
    >>> len(paras) > 1000 and all(8 <= len(p) <= 96 for p in paras)
    True
    """
    from pydoc_data.topics import topics

    out = []
    for key in sorted(topics):
        for para in topics[key].split("\n\n"):
            data = para.strip().encode("utf-8")
            if len(data) >= min_bytes:
                out.append(data[:max_len])
    return out


def split_heldout(paras: Sequence[bytes], heldout: int, *, seed: int = 0) -> Tuple[List[bytes], List[bytes]]:
    """Shuffle with a fixed seed and hold out ``heldout`` paragraphs: ``(train, heldout)``."""
    order = torch.randperm(len(paras), generator=torch.Generator().manual_seed(seed)).tolist()
    shuffled = [paras[i] for i in order]
    return shuffled[heldout:], shuffled[:heldout]


def collate(seqs: Sequence[bytes]) -> Batch:
    """Right-pad byte strings into ``(inputs, targets)``: targets are the next bytes, padding ignored.

    >>> inputs, targets = collate([b"abc", b"hello"])
    >>> inputs.shape, targets[0].tolist()
    (torch.Size([2, 4]), [98, 99, -100, -100])
    """
    width = max(len(s) for s in seqs) - 1
    inputs = torch.zeros(len(seqs), width, dtype=torch.long)
    targets = torch.full((len(seqs), width), IGNORE_INDEX, dtype=torch.long)
    for i, s in enumerate(seqs):
        t = torch.tensor(list(s), dtype=torch.long)
        inputs[i, : len(s) - 1] = t[:-1]
        targets[i, : len(s) - 1] = t[1:]
    return inputs, targets


def token_count(batch: Batch) -> int:
    """The tokens a batch's loss averages over: its non-ignored targets."""
    return int((batch[1] != IGNORE_INDEX).sum())


class ByteLM(nn.Module):
    """A small GPT-style causal transformer over bytes (pre-norm blocks, tied input/output embedding).

    >>> model = ByteLM()
    >>> model(torch.zeros(2, 5, dtype=torch.long)).shape
    torch.Size([2, 5, 256])
    """

    def __init__(self, dim: int = 48, layers: int = 2, heads: int = 4, max_len: int = 96) -> None:
        super().__init__()
        self.heads = heads
        self.tok = nn.Embedding(VOCAB, dim)
        self.pos = nn.Embedding(max_len, dim)
        self.blocks = nn.ModuleList(_Block(dim) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        nn.init.normal_(self.tok.weight, std=0.02)  # GPT-2's init: the tied head starts near uniform
        nn.init.normal_(self.pos.weight, std=0.02)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.tok(tokens) + self.pos(torch.arange(tokens.shape[1], device=tokens.device))
        for block in self.blocks:
            h = block(h, self.heads)
        return self.ln_f(h) @ self.tok.weight.T  # weight tying: the embedding's gradient arrives along two paths


class _Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, h: torch.Tensor, heads: int) -> torch.Tensor:
        b, t, d = h.shape
        q, k, v = self.qkv(self.ln1(h)).view(b, t, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = h + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return h + self.mlp(self.ln2(h))


def mean_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    """Token-mean cross-entropy (nats per byte) over the non-ignored targets of ``batch``."""
    inputs, targets = batch
    return F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten(), ignore_index=IGNORE_INDEX)


@torch.no_grad()
def heldout_loss(model: nn.Module, batches: Sequence[Batch]) -> float:
    """The one measurement every scheme's curve uses: token-mean loss over all held-out tokens."""
    sums = [
        F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten(), ignore_index=IGNORE_INDEX, reduction="sum").double()
        for inputs, targets in batches
    ]
    return float(torch.stack(sums).sum()) / sum(token_count(b) for b in batches)
