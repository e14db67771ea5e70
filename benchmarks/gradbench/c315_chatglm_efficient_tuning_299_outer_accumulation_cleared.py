"""ChatGLM-Efficient-Tuning's PPO workflow: the workflow loops over `gradient_accumulation_steps` batches itself and calls TRL's step on each, but TRL's step (from 0.4.5) clears the gradients before its own backward pass, so every earlier batch's gradient is cleared before the optimizer steps and the accumulation has no effect: each update applies only the last backward's gradient.

source: hiyouga/ChatGLM-Efficient-Tuning#299 (https://github.com/hiyouga/ChatGLM-Efficient-Tuning/issues/299), "关于PPO训练梯度累计及学习率衰减的问题" (closed): "TRL库从0.4.5版本后，在梯度累计部分增加了梯度清零的代码 ... 梯度累计是不是不生效，之前的梯度都清零了，只有最后一次反向传播的梯度保留了" (since TRL 0.4.5 the accumulation code clears the gradients ... is the accumulation ineffective, the earlier gradients all cleared and only the last backward's gradient kept?); the maintainer: "感谢指出问题，上述的两个问题在 7e6a5eb 中均得到了修复，我们去掉了外层的梯度累积循环" (thanks, both problems are fixed in 7e6a5eb: we removed the outer accumulation loop). Neither the workflow nor TRL's step was read; the case follows the issue's description: an outer loop over the accumulation batches, each handed to a step that clears, computes the PPO loss and backpropagates, and one optimizer step after the outer loop; the policy is a small policy-value network on random rollouts. The twin clears once per update, before the outer loop
family: misplaced-clear
shape: Adam(lr=1e-4), gradient_accumulation_steps = 4 batches of 8 per update, 4 updates
numeric: each update applies 1/4 of the last batch's gradient instead of the mean of the 4
watch: GG102
lint: GG102
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

gradient_accumulation_steps, cliprange = 4, 0.2
_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(6, 32), torch.nn.Tanh(), torch.nn.Linear(32, 5))
_gb.start(model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)


def ppo_step(obs, actions, old_logprobs, advantages, returns):
    optimizer.zero_grad()  # BUG
    out = model(obs)
    logprobs = torch.log_softmax(out[:, :4], -1).gather(1, actions[:, None]).squeeze(1)
    ratio = torch.exp(logprobs - old_logprobs)
    pg_loss = torch.max(-advantages * ratio, -advantages * torch.clamp(ratio, 1 - cliprange, 1 + cliprange)).mean()
    loss = (pg_loss + 0.1 * F.mse_loss(out[:, 4], returns)) / gradient_accumulation_steps
    loss.backward()


for update in range(4):
    # FIX: optimizer.zero_grad()
    for _ in range(gradient_accumulation_steps):
        obs, actions = torch.randn(8, 6), torch.randint(0, 4, (8,))
        with torch.no_grad():
            old_logprobs = torch.log_softmax(model(obs)[:, :4], -1).gather(1, actions[:, None]).squeeze(1)
        ppo_step(obs, actions, old_logprobs, torch.randn(8), torch.randn(8))
    optimizer.step()
_gb.done(model)
