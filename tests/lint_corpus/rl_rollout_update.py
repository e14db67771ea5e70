"""Actor-critic with a rollout phase under no_grad and an update phase: zero_grad, backward,
clip, step."""
import torch
from torch import nn


class ActorCritic(nn.Module):
    def __init__(self, obs_dim, n_actions):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(obs_dim, 64), nn.Tanh())
        self.pi = nn.Linear(64, n_actions)
        self.v = nn.Linear(64, 1)

    def forward(self, obs):
        h = self.body(obs)
        return torch.distributions.Categorical(logits=self.pi(h)), self.v(h).squeeze(-1)


def rollout(env, agent, steps):
    obs_buf, act_buf, rew_buf = [], [], []
    obs = env.reset()
    with torch.no_grad():
        for _ in range(steps):
            dist, _ = agent(obs)
            action = dist.sample()
            next_obs, reward, done = env.step(action)
            obs_buf.append(obs)
            act_buf.append(action)
            rew_buf.append(reward)
            obs = env.reset() if done else next_obs
    return torch.stack(obs_buf), torch.stack(act_buf), torch.tensor(rew_buf)


def update(agent, optimizer, obs, actions, returns, max_grad_norm=0.5):
    dist, values = agent(obs)
    advantages = returns - values.detach()
    policy_loss = -(dist.log_prob(actions) * advantages).mean()
    value_loss = (returns - values).pow(2).mean()
    loss = policy_loss + 0.5 * value_loss - 0.01 * dist.entropy().mean()
    optimizer.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(agent.parameters(), max_grad_norm)
    optimizer.step()
    return loss.item()


def train(env, iterations=100, steps=128, gamma=0.99):
    agent = ActorCritic(env.obs_dim, env.n_actions)
    optimizer = torch.optim.Adam(agent.parameters(), lr=7e-4, eps=1e-5)
    history = 0.0
    for it in range(iterations):
        obs, actions, rewards = rollout(env, agent, steps)
        returns = torch.zeros_like(rewards)
        running = 0.0
        for t in reversed(range(len(rewards))):
            running = rewards[t] + gamma * running
            returns[t] = running
        history += update(agent, optimizer, obs, actions, returns)
    return history
