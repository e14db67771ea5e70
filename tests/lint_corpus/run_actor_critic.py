"""Actor-critic with two optimizers (one per network), as in many RL codebases."""
import torch
from torch import nn


def main():
    torch.manual_seed(0)
    obs_dim, n_actions = 4, 2
    actor = nn.Sequential(nn.Linear(obs_dim, 16), nn.Tanh(), nn.Linear(16, n_actions)).double()
    critic = nn.Sequential(nn.Linear(obs_dim, 16), nn.Tanh(), nn.Linear(16, 1)).double()
    actor_optim = torch.optim.Adam(actor.parameters(), lr=3e-3)
    critic_optim = torch.optim.Adam(critic.parameters(), lr=1e-2)
    gamma = 0.99
    gen = torch.Generator().manual_seed(2)
    for episode in range(5):
        states = torch.randn(8, obs_dim, generator=gen, dtype=torch.float64)
        rewards = torch.randn(8, generator=gen, dtype=torch.float64)
        next_states = torch.randn(8, obs_dim, generator=gen, dtype=torch.float64)
        logits = actor(states)
        dist = torch.distributions.Categorical(logits=logits)
        actions = torch.zeros(8, dtype=torch.long)
        values = critic(states).squeeze(-1)
        with torch.no_grad():
            targets = rewards + gamma * critic(next_states).squeeze(-1)
        advantage = (targets - values).detach()
        critic_loss = nn.functional.mse_loss(values, targets)
        critic_optim.zero_grad()
        critic_loss.backward()
        critic_optim.step()
        actor_loss = -(dist.log_prob(actions) * advantage).mean()
        actor_optim.zero_grad()
        actor_loss.backward()
        actor_optim.step()
    return [p.detach().clone() for p in list(actor.parameters()) + list(critic.parameters())]


if __name__ == "__main__":
    main()
