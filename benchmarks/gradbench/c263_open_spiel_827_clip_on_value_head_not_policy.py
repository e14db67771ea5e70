"""OpenSpiel's PyTorch policy-gradient agent: the policy update backpropagates the policy loss and steps the policy optimizer, but the gradient clipping next to it is applied to the value (critic) network's parameters, whose loss is detached from this update, so the policy step is never clipped.

source: google-deepmind/open_spiel#827 (https://github.com/google-deepmind/open_spiel/issues/827), "Possible small bug" (labels bug, fixed): "It looks like the code here is optimizing the policy but clipping the gradients for the value head"; a maintainer: "Clipping the value head grad which is detached on `pg_class.loss` method is meaningless. Thank you for finding the bug"; fixed in c90e925. open_spiel/python/pytorch/policy_gradient.py was not read beyond the issue; the agent is reduced to separate policy and critic MLPs with an advantage-weighted log-likelihood policy loss. The twin clips the policy network's parameters
family: clip-misplaced
shape: SGD(lr=0.5) on the policy, max_global_gradient_norm 0.1, 4 updates on batches of 16 with large advantages
numeric: the bug's policy steps use the unclipped gradient (norm several times the threshold)
watch: out: the clip runs on gradients no step of this update uses; the watch checks where clips fall against backward passes and steps of the same parameters
lint: out: which network's parameters a clip should receive is the program's intent
bug-step: 1
"""
import torch

import _gb

max_global_gradient_norm = 0.1
_gb.setup()
policy = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
critic = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
_gb.start(policy)
pi_optimizer = torch.optim.SGD(policy.parameters(), lr=0.5)
critic_optimizer = torch.optim.SGD(critic.parameters(), lr=0.1)
for update in range(4):
    obs = torch.randn(16, 4)
    actions = torch.randint(0, 3, (16,))
    returns = 5 * torch.randn(16)
    values = critic(obs).squeeze(1)
    critic_optimizer.zero_grad()
    ((returns - values) ** 2).mean().backward()
    critic_optimizer.step()
    advantages = returns - values.detach()
    logp = torch.log_softmax(policy(obs), 1).gather(1, actions[:, None]).squeeze(1)
    pi_loss = -(advantages * logp).mean()
    pi_optimizer.zero_grad()
    pi_loss.backward()
    torch.nn.utils.clip_grad_norm_(critic.parameters(), max_global_gradient_norm)  # BUG
    # FIX: torch.nn.utils.clip_grad_norm_(policy.parameters(), max_global_gradient_norm)
    pi_optimizer.step()
_gb.done(policy)
