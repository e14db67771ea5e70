"""RLlib's TQC learner: the actor loss's Q-values are computed through the online critics without the critic freeze SAC uses for that pass; `compute_gradients` runs one backward pass per optimizer in registration order (critic, then policy), zeroing only that optimizer's parameters and keeping the gradients by reference, so the policy's backward adds the actor loss's critic gradients into the critic gradients already collected and the critic optimizer applies them.

source: ray-project/ray#65125 (https://github.com/ray-project/ray/pull/65125), "[RLlib] Fix TQC critic divergence: stop actor-loss gradients from leaking into the critics" (merged): "TQC's `_forward_train` computes the actor-loss Q-values (`qf_curr`) through the online critics without the critic-parameter freeze SAC and CQL apply to this pass. `SACTorchLearner.compute_gradients` (inherited by TQC) runs one backward pass per optimizer -- in registration order `qf` -> `policy` -> `alpha` -- zeroing only that optimizer's parameters and harvesting `param.grad` by reference. The policy backward therefore accumulates the actor loss's critic gradients into the already-harvested critic gradients, and the critic optimizer applies them". The learner is reduced to one quantile critic and a deterministic tanh actor (no alpha optimizer) on random transitions; the loop keeps the learner's order (one zero_grad and backward per optimizer, then every optimizer steps). The twin freezes the critic's parameters for the actor-loss forward, as the fix does
family: actor-critic-leak
shape: Adam(lr=1e-3) for the critic and for the actor, 6 updates on batches of 32 transitions (obs 6, action 2, 5 quantiles)
numeric: every critic update also applies the actor loss's gradient (raising the critic's value of the policy's actions)
watch: out: which loss should reach which network is the program's intent; each optimizer clears its own parameters before its pass and every gradient is applied once
lint: out: the critic is reached through the actor loss's expression, the loss's definition, not the gradient buffer's handling
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
critic = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 5))
actor = torch.nn.Sequential(torch.nn.Linear(6, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2), torch.nn.Tanh())
_gb.start(critic, actor)
optimizers = {"qf": torch.optim.Adam(critic.parameters(), lr=1e-3),
              "policy": torch.optim.Adam(actor.parameters(), lr=1e-3)}
for update in range(6):
    obs, act = torch.randn(32, 6), torch.rand(32, 2) * 2 - 1
    target_quantiles = torch.randn(32, 5)
    quantiles = critic(torch.cat([obs, act], 1))
    qf_loss = F.smooth_l1_loss(quantiles, target_quantiles)
    # FIX: critic.requires_grad_(False)
    qf_curr = critic(torch.cat([obs, actor(obs)], 1))
    # FIX: critic.requires_grad_(True)
    actor_loss = -qf_curr.mean()
    losses = {"qf": qf_loss, "policy": actor_loss}
    for name in ("qf", "policy"):  # compute_gradients: one backward per optimizer, in registration order
        optimizers[name].zero_grad()
        losses[name].backward(retain_graph=True)
    for optimizer in optimizers.values():
        optimizer.step()
_gb.done(critic, actor)
