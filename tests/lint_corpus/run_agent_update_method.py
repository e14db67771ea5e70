"""A TD3/DQN-style agent: it holds its optimizers and takes one update per call of train();
the loop that calls it is the script's."""
import torch
from torch import nn


class Agent:
    def __init__(self, obs_dim, n_actions):
        self.actor = nn.Sequential(nn.Linear(obs_dim, 16), nn.Tanh(), nn.Linear(16, n_actions)).double()
        self.critic = nn.Sequential(nn.Linear(obs_dim + n_actions, 16), nn.Tanh(), nn.Linear(16, 1)).double()
        self.actor_optimizer = torch.optim.Adam(self.actor.parameters(), lr=3e-3)
        self.critic_optimizer = torch.optim.Adam(self.critic.parameters(), lr=1e-2)

    def train(self, state, action, target_q):
        current_q = self.critic(torch.cat([state, action], 1))
        critic_loss = nn.functional.mse_loss(current_q, target_q)
        self.critic_optimizer.zero_grad()
        critic_loss.backward()
        self.critic_optimizer.step()

        actor_loss = -self.critic(torch.cat([state, self.actor(state)], 1)).mean()
        self.actor_optimizer.zero_grad()
        actor_loss.backward()
        self.actor_optimizer.step()


def main():
    torch.manual_seed(0)
    agent = Agent(4, 2)
    gen = torch.Generator().manual_seed(3)
    for _ in range(6):
        state = torch.randn(8, 4, generator=gen, dtype=torch.float64)
        action = torch.randn(8, 2, generator=gen, dtype=torch.float64)
        target_q = torch.randn(8, 1, generator=gen, dtype=torch.float64)
        agent.train(state, action, target_q)
    return [p.detach().clone() for p in list(agent.actor.parameters()) + list(agent.critic.parameters())]


if __name__ == "__main__":
    main()
