"""NeMo RL HfPolicyWorker.train: the global batch is split into micro-batches whose mean losses are each backpropagated and summed into the gradient before one optimizer step, so the step's gradient is gbs/mbs times the global batch's mean.

source: NVIDIA-NeMo/RL#84 (https://github.com/NVIDIA-NeMo/RL/issues/84), "Gradient scale in HfPolicyWorker.train": "When gradients are accumulated across micro batches, they should be averaged rather than summed up to eliminate the effect of global batch size. The current implementation results in a gradient scale proportional to gbs / mbs. This is not a big issue for Adam, but is still a potential issue for other optimizers and monitoring gradients." (hf_policy.py#L297-L303; labelled enhancement, closed). The code was not read: the worker is reduced to its loop as the issue describes it (a policy-gradient loss, the mean over a micro-batch of -advantage * log-prob, backward per micro-batch, one step per global batch), with SGD, an optimizer the issue names as affected. The twin divides each micro-batch's loss by the number of micro-batches
family: unscaled
shape: for gb in global batches (gbs = 16): self.optimizer.zero_grad(); for mb in gb.split(mbs = 4): loss = loss_fn(self.model(mb), ...); loss.backward(); self.optimizer.step(). SGD(lr=0.05), 4 global batches
numeric: every step applies 4 times the global batch's mean gradient
watch: GG104
lint: GG104
bug-step: 1
"""
import torch

import _gb


def loss_fn(logits, actions, advantages):
    logprobs = torch.log_softmax(logits, -1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)
    return -(advantages * logprobs).mean()


class HfPolicyWorker:
    def __init__(self, model, optimizer):
        self.model, self.optimizer = model, optimizer

    def train(self, data, gbs, mbs):
        self.model.train()
        for gb_start in range(0, len(data[0]), gbs):
            gb = [t[gb_start:gb_start + gbs] for t in data]
            self.optimizer.zero_grad()
            num_microbatches = gbs // mbs
            for mb_start in range(0, gbs, mbs):
                obs, actions, advantages = (t[mb_start:mb_start + mbs] for t in gb)
                loss = loss_fn(self.model(obs), actions, advantages)
                # FIX: loss = loss / num_microbatches
                loss.backward()
            self.optimizer.step()


_gb.setup()
policy = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 5))
_gb.start(policy)
worker = HfPolicyWorker(policy, torch.optim.SGD(policy.parameters(), lr=0.05))
data = (torch.randn(64, 6), torch.randint(0, 5, (64,)), torch.randn(64))
worker.train(data, gbs=16, mbs=4)
_gb.done(policy)
