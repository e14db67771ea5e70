"""verl's Megatron actor under pipeline parallelism: the forward step returns the scaled loss for backward and a dict of reported tensors (`model_output`) that still carry their autograd graph; Megatron's schedule keeps one such entry per micro-batch in `forward_data_store` until the whole mini-batch finishes, so each entry pins its micro-batch's graph, including the stage's received input buffer, and residency grows with the number of micro-batches.

source: volcengine/verl#7874 (https://github.com/volcengine/verl/pull/7874), "[trainer] fix: detach model_output from autograd graph" (merged): "Megatron's pipeline schedules accumulate one entry per micro-batch in `forward_data_store` and only clear it when the whole mini-batch finishes. Anything grad-attached that lands there pins that micro-batch's entire autograd graph -- including the graph's input, which under 1F1B is the freshly allocated P2P receive buffer ... Gradients are unaffected: they flow through the first return value (`scaled_loss`)", fixed with a `detach_tree` over the reported outputs. The schedule is written out for one stage (a received activation buffer that requires grad, forward, backward of the scaled loss, the entry appended), the actor a policy head computing log-probabilities and entropy over random tokens, the post-processing a mean of the stored entries. The twin detaches the entry as the fix does
family: graph-logging
shape: Adam(lr=1e-4), 3 mini-batches of 4 micro-batches (2 sequences of 6 tokens, hidden 16, vocabulary 24)
numeric: at the end of a mini-batch the store holds the graphs (and received buffers) of all its 4 micro-batches
watch: out: the store holds graph nodes, not gradient; every gradient flows through the scaled loss
lint: out: the tensors are kept by a list append inside the schedule, not an arithmetic sum in the loop
bug-step: end
"""
import torch
import torch.nn.functional as F

import _gb

n_micro, vocab = 4, 24
_gb.setup()
stage = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, vocab))
_gb.start(stage)
optimizer = torch.optim.Adam(stage.parameters(), lr=1e-4)


def detach_tree(obj):
    if isinstance(obj, torch.Tensor):
        return obj.detach() if obj.requires_grad else obj
    if isinstance(obj, dict):
        return {k: detach_tree(v) for k, v in obj.items()}
    return obj


def forward_step(recv_buffer, responses, advantages):
    logits = stage(recv_buffer)
    log_probs = torch.log_softmax(logits, -1).gather(-1, responses.unsqueeze(-1)).squeeze(-1)
    entropy = -(torch.softmax(logits, -1) * torch.log_softmax(logits, -1)).sum(-1)
    policy_loss = -(log_probs * advantages).mean()
    model_output = {"log_probs": log_probs, "entropy": entropy}
    return policy_loss / n_micro, model_output


forward_data_store = []
for mini_batch in range(3):
    optimizer.zero_grad()
    forward_data_store = []
    for micro in range(n_micro):
        recv_buffer = torch.randn(2, 6, 16, requires_grad=True)  # the stage's P2P receive buffer
        scaled_loss, model_output = forward_step(recv_buffer, torch.randint(0, vocab, (2, 6)), torch.randn(2, 6))
        scaled_loss.backward()
        forward_data_store.append(model_output)  # BUG
        # FIX: forward_data_store.append(detach_tree(model_output))
    metrics = {k: torch.stack([d[k].mean() for d in forward_data_store]).mean().item() for k in ("entropy",)}
    optimizer.step()
_gb.done(stage, kept=[t for d in forward_data_store for t in d.values()])
