"""Megatron-LM with multi-token prediction and `calculate_per_token_loss`: the losses are summed over tokens and `finalize_model_grads()` scales every gradient by 1 / (the main loss's token count N), but the MTP layer's loss is computed with a rolled loss mask that has fewer valid tokens M (the last positions are zero-filled), so its gradient per token is under-weighted by M / N.

source: NVIDIA/Megatron-LM#3159 (https://github.com/NVIDIA/Megatron-LM/pull/3159), "Add a normalized scale for MTP per token loss" (merged; addresses the issue #2417, labelled bug): "finalize_model_grads() scales all model gradients uniformly by 1/total_num_tokens, where total_num_tokens is accumulated from the main loss calculation using the original loss mask. However, MTP layers use rolled loss masks (via roll_tensor() with shifts=-1), which have fewer valid tokens ... Without fix: MTP gradient per token = (M tokens * grad) / N / M = grad * M/N (under-weighted)". The model code was not read: the GPT with one MTP layer is reduced to an embedding, a main head predicting token t+1 and an MTP head predicting token t+2; short sequences (8 tokens, a loss mask with the last 2 positions padded) make the rolled mask lose a visible share. The twin scales the MTP loss by N / M before the common 1 / N, the pull request's normalised scale
family: num-items
shape: SGD(lr=0.5), batches of 6 sequences of 8 tokens, MTP weight 0.3; 5 steps
numeric: the MTP loss's gradient is scaled by M / N (5 / 6) on every step
watch: out: which token count each loss is normalised by is data; every gradient is applied once and cleared
lint: out: the token counts come from the loss masks at run time
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

vocab, mtp_loss_scaling_factor = 16, 0.3
_gb.setup()
embedding = torch.nn.Embedding(vocab, 16)
main_head = torch.nn.Linear(16, vocab)
mtp_head = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Tanh(), torch.nn.Linear(16, vocab))
_gb.start(embedding, main_head, mtp_head)
params = list(embedding.parameters()) + list(main_head.parameters()) + list(mtp_head.parameters())
optimizer = torch.optim.SGD(params, lr=0.5)


def roll_tensor(t, shifts=-1):
    rolled = torch.roll(t, shifts=shifts, dims=-1)
    rolled[..., shifts:] = 0
    return rolled


batches = []
for _ in range(5):
    tokens = torch.randint(0, vocab, (6, 9))
    loss_mask = torch.ones(6, 8)
    loss_mask[:, 6:] = 0  # padding at the end of each sequence
    batches.append((tokens, loss_mask))
for tokens, loss_mask in batches:
    inputs, labels = tokens[:, :-1], tokens[:, 1:]
    h = embedding(inputs)
    main = F.cross_entropy(main_head(h).reshape(-1, vocab), labels.reshape(-1), reduction="none")
    main_loss = (main * loss_mask.reshape(-1)).sum()
    num_tokens = loss_mask.sum()
    mtp_labels = roll_tensor(labels)
    mtp_mask = roll_tensor(loss_mask)
    mtp = F.cross_entropy(mtp_head(h).reshape(-1, vocab), mtp_labels.reshape(-1), reduction="none")
    mtp_loss = (mtp * mtp_mask.reshape(-1)).sum()
    mtp_loss = mtp_loss * mtp_loss_scaling_factor  # BUG
    # FIX: mtp_loss = mtp_loss * mtp_loss_scaling_factor * num_tokens / mtp_mask.sum()
    optimizer.zero_grad()
    (main_loss + mtp_loss).backward()
    for p in params:  # finalize_model_grads: scale all gradients by 1 / total_num_tokens
        p.grad /= num_tokens
    optimizer.step()
_gb.done(embedding, main_head, mtp_head)
