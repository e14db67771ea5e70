"""easy-rl Double DQN: the TD target `reward + gamma * Q_target(s', argmax_a Q_policy(s', a))` is computed without `detach()`, and the target network is the policy network itself (the same object), so the TD loss also backpropagates through the target and the update is a full-gradient (residual) step instead of the semi-gradient one.

source: datawhalechina/easy-rl#117 (https://github.com/datawhalechina/easy-rl/pull/117), "distinguish Qnet and set detach() on TD target": "1. TD target does not have detach(), which is equivalent to not using semi-gradient method; ... 3. During debugging, I found that the outputs of policy_net and target_net are the same, which is because no they maintain the same network, and target_net changes immediately after policy_net changes." The maintainer (johnjim0816): "Thanks for your PR, I will consider you suggestions. But now we are trying to update new template for all algos, thus I cannot merge your PR now." (closed unmerged). The notebook was not read: the update follows the pull request's description (q = policy_net(s).gather(a); next actions from policy_net(s').max(1)[1]; next q from target_net(s').gather; MSE to r + gamma * next_q * (1 - done)); Q networks reduced to an MLP on 4-dimensional states. The twin detaches the TD target (the pull request's first point; the shared target network is left as it is)
family: detached-loss
shape: Adam(lr=1e-3); batch 32, gamma 0.95; 6 updates
numeric: every update includes -gamma * dQ(s', a*)/dtheta times the TD error
watch: out: whether the target should carry a gradient is the loss's definition; every gradient is applied once and cleared
lint: out: a missing detach inside a loss expression is the loss's definition, not the gradient buffer's handling
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

_gb.setup()
policy_net = torch.nn.Sequential(torch.nn.Linear(4, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
target_net = policy_net
_gb.start(policy_net)
optimizer = torch.optim.Adam(policy_net.parameters(), lr=1e-3)
gamma = 0.95
for update in range(6):
    state, next_state = torch.randn(32, 4), torch.randn(32, 4)
    action, reward, done = torch.randint(0, 2, (32, 1)), torch.randn(32), (torch.rand(32) < 0.1).float()
    q_values = policy_net(state).gather(dim=1, index=action).squeeze(1)
    next_action = policy_net(next_state).max(1)[1].unsqueeze(1)
    next_q_values = target_net(next_state).gather(dim=1, index=next_action).squeeze(1)
    expected_q_values = reward + gamma * next_q_values * (1 - done)
    loss = F.mse_loss(q_values, expected_q_values)  # BUG
    # FIX: loss = F.mse_loss(q_values, expected_q_values.detach())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
_gb.done(policy_net)
