"""minimalRL's REINFORCE: `train_net` walks the episode backwards and, for every time step, calls `optimizer.zero_grad()`, `loss.backward()` and `optimizer.step()` on that step's term `-log(prob) * R`, so the policy is updated T times per episode on single terms (each evaluated with the probabilities already moved by the previous updates) instead of once on the whole episode's loss.

source: seungeunrho/minimalRL#26 (https://github.com/seungeunrho/minimalRL/issues/26), "Problem of `train_net()` in REINFORCE algorithm": "The policy is updated for each step of an episode. But the policy is supposed to be updated after a complete episode". A maintainer (seolhokim): "That's right. policy has to be updated after for loop and i fixed it." REINFORCE.py was not read beyond the issue's excerpt; CartPole is replaced by a synthetic 4-feature environment (reward 1 when the action matches the sign of the first feature, 8 steps per episode) so the case runs without gym. The twin clears once, backpropagates every term and steps once after the loop, the maintainer's fix
family: misplaced-step
shape: Adam(lr=2e-3), gamma 0.98; 4 episodes of 8 steps
numeric: 8 optimizer steps per episode on single-step terms instead of one step on the episode's summed loss
watch: out: every step applies its own term's gradient once and clears it; how many updates an episode should give is the algorithm's intent
lint: out: a clear, backward and step per loop iteration is an ordinary training loop; that the loop runs over one episode's time steps is the program's intent
bug-step: 1
"""
import torch

import _gb

gamma = 0.98
_gb.setup()
states = torch.randn(4, 8, 4)
uniforms = torch.rand(4, 8)
pi = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2), torch.nn.Softmax(dim=-1))
_gb.start(pi)
optimizer = torch.optim.Adam(pi.parameters(), lr=2e-3)
for episode in range(4):
    data = []
    for t in range(8):
        s = states[episode, t]
        prob = pi(s)
        a = int(uniforms[episode, t] > prob[0])
        r = 1.0 if a == int(s[0] > 0) else 0.0
        data.append((r, prob[a]))
    R = 0
    # FIX: optimizer.zero_grad()
    for r, prob in data[::-1]:
        R = r + gamma * R
        loss = -torch.log(prob) * R
        optimizer.zero_grad()  # BUG
        loss.backward()
        optimizer.step()  # BUG
    # FIX: optimizer.step()
_gb.done(pi)
