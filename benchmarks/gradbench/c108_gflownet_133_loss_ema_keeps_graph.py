"""gflownet: the running averages of the terminal and non-terminal losses are updated from the loss tensors without detaching them, so the graph of every iteration stays in memory.

source: alexhernandezgarcia/gflownet#133 (https://github.com/alexhernandezgarcia/gflownet/pull/133), "Compute EMAs outside of pytorch" (merged): "the GFlowNet computes a running average of loss for the terminal and the non-terminal states. The issue is that this computation was done with pytorch tensors and without any detach. The result is that the whole pytorch computational graph is maintained in memory ... and grows very fast with every iteration. I've modified the code to perform this computation outside of pytorch". Written from the pull request's description (the pre-fix lines were not read): each running average is ema = alpha * ema + (1 - alpha) * loss on the live loss tensors; the twin uses .item()
family: graph-logging
shape: class GFlowNetAgent: train(): for it in range(n_train_steps): batch = sample_batch(); losses = self.loss(batch) -> (loss, loss_term, loss_flow); losses[0].backward(); clip; opt.step(); opt.zero_grad(); if self.ema_loss_term is None: initialise, else self.ema_loss_term = self.ema_alpha * self.ema_loss_term + (1 - self.ema_alpha) * losses[1] (and the same for the non-terminal loss)
numeric: each running average reaches the graphs of all iterations so far
watch: out: a logging average holds graph nodes, not gradient; the watch follows .grad
lint: GG201
bug-step: end
"""
import torch

import _gb


class GFlowNetAgent:
    def __init__(self, ema_alpha=0.5):
        self.forward_policy = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
        self.logZ = torch.nn.Parameter(torch.zeros(1))
        self.opt = torch.optim.Adam(list(self.forward_policy.parameters()) + [self.logZ], lr=1e-3)
        self.ema_alpha = ema_alpha
        self.ema_loss_term = None
        self.ema_loss_flow = None

    def loss(self, states, terminal):
        logits = self.forward_policy(states)
        log_flow = torch.logsumexp(logits, dim=1)
        reward = states.abs().sum(1).log()
        loss_term = ((log_flow[terminal] - reward[terminal]) ** 2).mean()
        loss_flow = ((log_flow[~terminal] + self.logZ - logits[~terminal].max(1).values) ** 2).mean()
        return loss_term + loss_flow, loss_term, loss_flow

    def train(self, batches):
        for states, terminal in batches:
            losses = self.loss(states, terminal)
            losses[0].backward()
            torch.nn.utils.clip_grad_norm_(self.forward_policy.parameters(), 1.0)
            self.opt.step()
            self.opt.zero_grad()
            loss_term, loss_flow = losses[1], losses[2]  # BUG
            # FIX: loss_term, loss_flow = losses[1].item(), losses[2].item()
            if self.ema_loss_term is None:
                self.ema_loss_term, self.ema_loss_flow = loss_term, loss_flow
            else:
                self.ema_loss_term = self.ema_alpha * self.ema_loss_term + (1 - self.ema_alpha) * loss_term
                self.ema_loss_flow = self.ema_alpha * self.ema_loss_flow + (1 - self.ema_alpha) * loss_flow


_gb.setup()
agent = GFlowNetAgent()
_gb.start(agent.forward_policy, agent.logZ)
batches = [(torch.randn(10, 6), torch.arange(10) % 3 == 0) for _ in range(12)]
agent.train(batches)
_gb.done(agent.forward_policy, agent.logZ, kept=[agent.ema_loss_term, agent.ema_loss_flow])
