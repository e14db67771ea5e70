"""encode-attend-navigate-pytorch trainer.py: the policy loss multiplies the log-probabilities by the TD error `reward - critic prediction` without detaching the prediction, and the actor and critic losses are summed into one backward pass, so the critic's gradient also carries the policy loss (the critic is pushed to predict whatever lowers the policy loss).

source: astariul/encode-attend-navigate-pytorch#2 (https://github.com/astariul/encode-attend-navigate-pytorch/issues/2), "Critic not detached from policy loss" (trainer.py#L68 at d3eddd8): "The policy loss uses the critic (to compute the TD error) ... But the critic should not receive any backpropagation from the policy loss. Gradients should be stopped. In the original implementation: tf.stop_gradient(self.reward-self.predictions)". Fixed by the author in #3 (merged, "Fix gradients & reproduce results"): "Because critic values were not detached when computing policy loss, the critic network was backpropagated from both the policy loss and critic loss, leading to unstable training ... by detaching critic value before computing policy loss". The thread says both losses are summed for one optimizer. The encoder-decoder pointer network is reduced to an actor MLP sampling a city index and a critic MLP; the reward is a fixed function of the chosen city. The twin detaches the critic's prediction, as #3 does
family: actor-critic-leak
shape: log_prob = actor log-probabilities of sampled actions; predictions = critic(inputs); td_error = reward - predictions; actor_loss = (td_error * log_prob).mean(); critic_loss = mse(predictions, reward); loss = actor_loss + critic_loss; optimizer.zero_grad(); loss.backward(); clip_grad_norm_(1.0); optimizer.step(). Adam(lr=1e-3) over both networks, 8 steps
numeric: the critic's update includes the policy loss's gradient through the TD error
watch: out: which loss should reach which network is the program's intent; the summed gradient is applied once and cleared (no buffer rule is broken)
lint: out: a missing detach inside a loss expression is the loss's definition, not the gradient buffer's handling
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
actor = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 5))
critic = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
_gb.start(actor, critic)
optimizer = torch.optim.Adam(list(actor.parameters()) + list(critic.parameters()), lr=1e-3)
gen = torch.Generator().manual_seed(1)
for step in range(8):
    inputs = torch.randn(16, 6)
    logits = actor(inputs)
    actions = torch.multinomial(torch.softmax(logits, -1).detach(), 1, generator=gen).squeeze(-1)
    log_prob = torch.log_softmax(logits, -1).gather(1, actions.unsqueeze(1)).squeeze(1)
    reward = -(actions.to(inputs.dtype) - inputs[:, 0]).abs()
    predictions = critic(inputs).squeeze(-1)
    td_error = reward - predictions  # BUG
    # FIX: td_error = reward - predictions.detach()
    actor_loss = (td_error * log_prob).mean()
    critic_loss = F.mse_loss(predictions, reward)
    loss = actor_loss + critic_loss
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(list(actor.parameters()) + list(critic.parameters()), 1.0)
    optimizer.step()
_gb.done(actor, critic)
