"""OpenNMT-py trainer: the accumulated batches' summed token loss is normalised by the number of sentences even when `-normalization tokens` is passed, so each update's gradient is scaled by the batches' tokens-per-sentence ratio instead of being the per-token mean.

source: OpenNMT/OpenNMT-py#526 (https://github.com/OpenNMT/OpenNMT-py/pull/526), "Bug fix for gradient accumulation." (merged). The author (helson73), asked what was wrong: "Previously loss is normalized by sent length, even option "-normalization tokens" is passed. I re-run the experiment, accuracy is slightly improved, but no big difference." The trainer was not read: the loop follows the description (accum_count batches; normalization = sum over the accumulated batches of batch.batch_size where the option asks for the sum of target tokens; each batch's loss = summed token NLL / normalization; backward; step once per accumulation); the sequence model is reduced to a token classifier over batches of 8 sentences with lengths drawn from 3 to 12. The twin normalises by the accumulated target tokens, the normalization the option selects
family: mean-of-means
shape: SGD(lr=1.0, the OpenNMT default), max_grad_norm = 5, accum_count = 2, batches of 8 sentences of 3-12 tokens, 4 updates
numeric: each update is about tokens-per-sentence (about 7) times too large before the clip
watch: out: the loss is divided once per window; which count (sentences or tokens) normalises it is the option's intent, not the buffers' state
lint: out: which count the normalization reads depends on the option's value at run time
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

vocab, accum_count, max_grad_norm = 30, 2, 5.0
_gb.setup()
model = torch.nn.Sequential(torch.nn.Embedding(vocab, 16), torch.nn.Linear(16, vocab))
_gb.start(model)
optim = torch.optim.SGD(model.parameters(), lr=1.0)
batches = []
for _ in range(4 * accum_count):
    lengths = torch.randint(3, 13, (8,))
    batches.append([torch.randint(0, vocab, (int(n) + 1,)) for n in lengths])
for i in range(0, len(batches), accum_count):
    true_batchs = batches[i:i + accum_count]
    normalization = sum(len(b) for b in true_batchs)  # BUG
    # FIX: normalization = sum(sum(len(s) - 1 for s in b) for b in true_batchs)
    optim.zero_grad()
    for batch in true_batchs:
        loss = sum(F.cross_entropy(model(s[:-1]), s[1:], reduction="sum") for s in batch)
        loss.div(normalization).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    optim.step()
_gb.done(model)
