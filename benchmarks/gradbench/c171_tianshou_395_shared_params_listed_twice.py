"""tianshou test_ppo.py: actor and critic share a preprocessing `Net`, and the optimizer is built on `list(actor.parameters()) + list(critic.parameters())`, so the shared parameters appear twice in one parameter group and every `optim.step()` updates them twice with the same gradient (and one Adam state).

source: thu-ml/tianshou#395 (https://github.com/thu-ml/tianshou/issues/395), "optimizer double update ? deprecation soon" (labelled bug, closed): "it may be needed a set() wrapping the list of params in test/discrete/test_ppo.py#L79 ... this is related to the warning UserWarning: optimizer contains a parameter group with duplicate parameters ... The current version of the PPO test is updating some parameters twice". The maintainer (Trinkle23897): "You can use set(actor.parameters()).union(critic.parameters())". The test was not read beyond the issue: net = Net(state_shape, hidden_sizes); actor = Actor(net, action_shape); critic = Critic(net); optim = torch.optim.Adam(list(actor.parameters()) + list(critic.parameters()), lr=lr); the PPO loss is reduced to a clipped surrogate plus value loss on random rollouts. The twin builds the optimizer on the set union, as the maintainer suggests
family: wrong-optimizer
shape: Adam(lr=3e-3); shared Net 4-64-64, actor head 64-2, critic head 64-1; 5 updates on batches of 64
numeric: every step moves the shared parameters by two Adam updates
watch: GG101
lint: out: whether two modules share parameters is decided when they are built, at run time
bug-step: 1
"""
import warnings

import torch
import torch.nn.functional as F

import _gb

warnings.filterwarnings("ignore", message="optimizer contains a parameter group with duplicate parameters")


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.model = torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                                         torch.nn.ReLU())

    def forward(self, obs):
        return self.model(obs)


class Actor(torch.nn.Module):
    def __init__(self, preprocess_net):
        super().__init__()
        self.preprocess = preprocess_net
        self.last = torch.nn.Linear(64, 2)

    def forward(self, obs):
        return self.last(self.preprocess(obs))


class Critic(torch.nn.Module):
    def __init__(self, preprocess_net):
        super().__init__()
        self.preprocess = preprocess_net
        self.last = torch.nn.Linear(64, 1)

    def forward(self, obs):
        return self.last(self.preprocess(obs)).squeeze(-1)


_gb.setup()
net = Net()
actor, critic = Actor(net), Critic(net)
_gb.start(net, actor.last, critic.last)
optim = torch.optim.Adam(list(actor.parameters()) + list(critic.parameters()), lr=3e-3)  # BUG
# FIX: optim = torch.optim.Adam(set(actor.parameters()).union(critic.parameters()), lr=3e-3)
for update in range(5):
    obs = torch.randn(64, 4)
    act = torch.randint(0, 2, (64,))
    old_logp = torch.log_softmax(torch.randn(64, 2), -1).gather(1, act[:, None]).squeeze(1)
    adv, returns = torch.randn(64), torch.randn(64)
    logp = torch.log_softmax(actor(obs), -1).gather(1, act[:, None]).squeeze(1)
    ratio = (logp - old_logp).exp()
    clip_loss = -torch.min(ratio * adv, ratio.clamp(0.8, 1.2) * adv).mean()
    vf_loss = F.mse_loss(critic(obs), returns)
    loss = clip_loss + 0.5 * vf_loss
    optim.zero_grad()
    loss.backward()
    optim.step()
_gb.done(net, actor.last, critic.last)
