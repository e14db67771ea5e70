"""simple-nmt trainer.py (MaximumLikelihoodEstimationEngine.train): gradients are cleared only when `engine.state.iteration % engine.config.iteration_per_update == 1`, which never holds when `iteration_per_update == 1` (every iteration is an update), so with that setting the gradients are never cleared and every step applies the sum of all gradients so far.

source: kh-kim/simple-nmt#22 (https://github.com/kh-kim/simple-nmt/pull/22), "hotfix: handle zero_grad in case of iteration_per_update==1." (merged). The pre- and post-fix lines were read in copies of the trainer found by a code search: before, `if engine.state.iteration % engine.config.iteration_per_update == 1: engine.optimizer.zero_grad()`; after, `if engine.state.iteration % engine.config.iteration_per_update == 1 or engine.config.iteration_per_update == 1: if engine.state.iteration > 1: engine.optimizer.zero_grad()` (the step itself runs when iteration % iteration_per_update == 0, after clip_grad_norm_). The ignite Engine is replaced by a plain loop with a 1-based iteration counter (as the engine's state keeps it); the sequence-to-sequence model by a token classifier; the loss is divided by the batch size and iteration_per_update as in the trainer. The twin has the fixed condition
family: missing-clear
shape: Adam(lr=1e-3), max_grad_norm = 5, iteration_per_update = 1, 6 iterations of batches of 16
numeric: from step 2 on every update applies the sum of all earlier gradients
watch: GG101
lint: GG101
bug-step: 2
"""
import torch
import torch.nn.functional as F

import _gb


class Config:
    iteration_per_update = 1
    max_grad_norm = 5.0


class State:
    iteration = 0


vocab = 25
_gb.setup()
model = torch.nn.Sequential(torch.nn.Embedding(vocab, 16), torch.nn.Tanh(), torch.nn.Linear(16, vocab))
_gb.start(model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
config, state = Config(), State()
data = [torch.randint(0, vocab, (16, 10)) for _ in range(6)]
for mini_batch in data:
    state.iteration += 1
    model.train()
    if state.iteration % config.iteration_per_update == 1:  # BUG
        optimizer.zero_grad()  # BUG
    # FIX: if state.iteration % config.iteration_per_update == 1 or config.iteration_per_update == 1:
    # FIX:     if state.iteration > 1:
    # FIX:         optimizer.zero_grad()
    x, y = mini_batch[:, :-1], mini_batch[:, 1:]
    y_hat = model(x)
    loss = F.cross_entropy(y_hat.reshape(-1, vocab), y.reshape(-1), reduction="sum")
    backward_target = loss.div(y.size(0)).div(config.iteration_per_update)
    backward_target.backward()
    if state.iteration % config.iteration_per_update == 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
        optimizer.step()
_gb.done(model)
