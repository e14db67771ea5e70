"""minimind's pretraining loop: the batch counter starts at `start_step + 1` (1 on a fresh run) while the update test is still `(step + 1) % accumulation_steps == 0`, so the first accumulation window steps after accumulation_steps - 1 micro-batches whose losses were each divided by accumulation_steps (its gradient is (K-1)/K of its mean), and every later window is shifted by one batch.

source: jingyaogong/minimind#691 (https://github.com/jingyaogong/minimind/issues/691), "梯度更新和累积步数逻辑不一致" (closed): "注意到这里step从start_step+1开始，因此更新梯度时(step+1)%args.accumulation_steps这里的+1是没必要的" (step starts at start_step+1, so the +1 in (step+1) % accumulation_steps is unnecessary); the maintainer: "已知问题，已经改了下次更新推送" (a known issue, fixed in the next push). The loop is minimind's train_epoch reduced to its accumulation logic (loss / accumulation_steps, clip at 1.0 and AdamW step when the test passes, zero_grad(set_to_none=True) after the step) on a small causal language model over random tokens; the issue's screenshot was not read. The twin tests step % accumulation_steps
family: underscaled-window
shape: AdamW(lr=5e-4, weight decay 0.01), accumulation_steps = 4, one epoch of 12 batches of 4 sequences of 8 tokens
numeric: the first step uses 3 micro-batches divided by 4; the bug's windows are batches 1-3, 4-7, 8-11 and batch 12 never reaches a step, the twin's 1-4, 5-8, 9-12
watch: GG111
lint: GG111
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

accumulation_steps, grad_clip, vocab, start_step = 4, 1.0, 32, 0
_gb.setup()
model = torch.nn.Sequential(torch.nn.Embedding(vocab, 24), torch.nn.Linear(24, 48), torch.nn.SiLU(),
                            torch.nn.Linear(48, vocab))
_gb.start(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.01)
loader = [torch.randint(0, vocab, (4, 9)) for _ in range(12)]
for step, tokens in enumerate(loader, start=start_step + 1):
    X, Y = tokens[:, :-1], tokens[:, 1:]
    loss = F.cross_entropy(model(X).flatten(0, 1), Y.flatten())
    loss = loss / accumulation_steps
    loss.backward()
    if (step + 1) % accumulation_steps == 0:  # BUG
    # FIX: if step % accumulation_steps == 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
_gb.done(model)
