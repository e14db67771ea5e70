"""TRL's PPOTrainer with gradient accumulation: inside `accelerator.accumulate(model)` it clears the gradients only when `i % gradient_accumulation_steps == 0`, the first micro-batch of a window, where Accelerate's optimizer skips `zero_grad()` (it acts only when gradients are synchronised, on a window's last micro-batch), so the gradients are never cleared and every step applies the sum of all earlier windows' gradients as well as its own.

source: huggingface/trl#583 (https://github.com/huggingface/trl/issues/583), "Bug in gradient accumulation in PPO trainer" (closed): "when using `accelerator.accumulate` you need to do `optimizer.zero_grad()` at the same time as `optimizer.step()`, however the code in the PPO trainer does `zero_grad()` every `gradient_accumulation_steps` ... You can verify that this is causing an issue by increasing the amount of samples in dummy dataset ... You will see that this test will fail"; the maintainers' hotfix PR #584 ("As reported by @Uncomfy, the tests used to pass within a single training step but fails if one uses larger dataset") clears after each step as Accelerate's tutorial does. ppo_trainer.py's loop is written out with Accelerate (Accelerator(gradient_accumulation_steps=2) on the CPU), the minibatch update reduced to a clipped policy-gradient loss plus a value loss of a small policy-value network on random rollouts. The twin clears after every optimizer.step(), as the hotfix does
family: missing-clear
shape: Adam(lr=1e-4), gradient_accumulation_steps = 2, 4 PPO epochs over 4 minibatches of 8 (obs 6, 4 actions)
numeric: step n applies the sum of the gradients of all n windows so far
watch: GG101
lint: out: that Accelerate's optimizer skips zero_grad on the micro-batch the test selects is the framework's behaviour at run time; the loop's text clears once per window
bug-step: 2
"""
import torch
import torch.nn.functional as F
from accelerate import Accelerator

import _gb

gradient_accumulation_steps, cliprange, vf_coef = 2, 0.2, 0.1
_gb.setup()
accelerator = Accelerator(gradient_accumulation_steps=gradient_accumulation_steps, cpu=True)
model = torch.nn.Sequential(torch.nn.Linear(6, 32), torch.nn.Tanh(), torch.nn.Linear(32, 5))
_gb.start(model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
model, optimizer = accelerator.prepare(model, optimizer)
obs, actions = torch.randn(32, 6), torch.randint(0, 4, (32,))
with torch.no_grad():
    old_logprobs = torch.log_softmax(model(obs)[:, :4], -1).gather(1, actions[:, None]).squeeze(1)
advantages, returns = torch.randn(32), torch.randn(32)
for ppo_epoch in range(4):
    for i, idx in enumerate(torch.arange(32).chunk(4)):
        with accelerator.accumulate(model):
            if i % gradient_accumulation_steps == 0:  # BUG
                optimizer.zero_grad()  # BUG
            out = model(obs[idx])
            logprobs = torch.log_softmax(out[:, :4], -1).gather(1, actions[idx, None]).squeeze(1)
            ratio = torch.exp(logprobs - old_logprobs[idx])
            pg_loss = torch.max(-advantages[idx] * ratio,
                                -advantages[idx] * torch.clamp(ratio, 1 - cliprange, 1 + cliprange)).mean()
            vf_loss = 0.5 * F.mse_loss(out[:, 4], returns[idx])
            accelerator.backward(pg_loss + vf_coef * vf_loss)
            optimizer.step()
            # FIX: optimizer.zero_grad()
_gb.done(accelerator.unwrap_model(model))
