"""Megatron-LM MoE with `--calculate-per-token-loss`: `_apply_seq_aux_loss` reshapes the routing map to [seq_length, bsz * num_experts] and passes `routing_map.shape[0]` (the sequence length) as the valid token count that pre-multiplies the auxiliary loss's gradient to cancel the later global 1 / total_tokens, where the micro-batch's token count is seq_length * micro_batch_size, so the sequence-level load-balancing gradient carries a spurious 1 / micro-batch-size factor.

source: NVIDIA/Megatron-LM#5798 (https://github.com/NVIDIA/Megatron-LM/pull/5798), "Fix for sequence-level aux MoE loss being dependent on batch size" (merged): "under --calculate-per-token-loss, the seq_load_balancing_loss gradient is scaled by a spurious 1/MBS factor, so increasing the micro-batch size silently deprioritizes load balancing ... Because it supplies seq_len instead of the micro-batch total seq_len*MBS, the MBS factor never cancels ... Fix: Pass valid_token_count=local_num_tokens * bsz". The MoE code was not read beyond the description: a router over 4 experts with a sequence-level load-balancing loss (per sequence: num_experts * sum over experts of the mean routing probability times the fraction of top-1 tokens, averaged over sequences), multiplied by the valid token count, added to the summed token loss and divided by the micro-batch's token count, as finalize_model_grads does; micro-batch size 4, sequences of 6 tokens. The twin passes seq_length * micro_batch_size, the fix
family: num-items
shape: SGD(lr=0.2), micro-batches of 4 sequences of 6 tokens, 4 experts, aux coefficient 0.5; 5 steps
numeric: the load-balancing loss's gradient is 1/4 of what it should be on every step
watch: out: which token count a loss is multiplied by is data; every gradient is applied once and cleared
lint: out: the token count is read from a tensor's shape at run time
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

num_experts, seq_length, micro_batch_size, aux_coeff = 4, 6, 4, 0.5
_gb.setup()
router = torch.nn.Linear(8, num_experts)
experts = torch.nn.ModuleList(torch.nn.Linear(8, 1) for _ in range(num_experts))
_gb.start(router, experts)
optimizer = torch.optim.SGD(list(router.parameters()) + list(experts.parameters()), lr=0.2)
batches = [(torch.randn(seq_length, micro_batch_size, 8), torch.randn(seq_length, micro_batch_size, 1)) for _ in range(5)]
for x, y in batches:
    probs = F.softmax(router(x), dim=-1)  # [seq, bsz, experts]
    top1 = probs.argmax(-1)
    out = torch.stack([experts[e](x) for e in range(num_experts)], -1).squeeze(-2)  # [seq, bsz, experts]
    pred = out.gather(-1, top1.unsqueeze(-1)) * probs.gather(-1, top1.unsqueeze(-1))
    token_loss = ((pred - y) ** 2).sum()
    routing_map = F.one_hot(top1, num_experts).reshape(seq_length, micro_batch_size * num_experts)
    fraction = F.one_hot(top1, num_experts).to(probs.dtype).mean(0)  # [bsz, experts]
    seq_aux = (num_experts * (fraction * probs.mean(0)).sum(-1)).mean()
    local_num_tokens = routing_map.shape[0]
    valid_token_count = local_num_tokens  # BUG
    # FIX: valid_token_count = local_num_tokens * micro_batch_size
    total_tokens = seq_length * micro_batch_size
    loss = (token_loss + aux_coeff * seq_aux * valid_token_count) / total_tokens
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
_gb.done(router, experts)
