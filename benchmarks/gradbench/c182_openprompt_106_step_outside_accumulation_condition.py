"""OpenPrompt tutorial 4.1: the loop counts micro-batches and clips the gradients only when `actual_step % gradient_accumulation_steps == 0`, but `optimizer.step()`, `zero_grad()` and the scheduler step sit outside that test, so every micro-batch is its own optimizer step and no accumulation happens (the clip acts on one micro-batch every fourth step).

source: thunlp/OpenPrompt#106 (https://github.com/thunlp/OpenPrompt/issues/106), "Optimizer step outside gradient_accumulation condition in tutorial 4.1?", quoting the loop (loss.backward(); tot_loss += loss.item(); actual_step += 1; if actual_step % gradient_accumulation_steps == 0: clip_grad_norm_(prompt_model.parameters(), 1.0); glb_step += 1 ...; then, outside the if, optimizer1.step(); optimizer1.zero_grad(); scheduler1.step() ...) and proposing to move the steps inside the if. The maintainer (ShengdingHu): "OMG, thanks for discovering the ridiculous bug we made, we are re-running th[e experiments]". The tutorial loop was read in the issue and in copies of the tutorial found by the code search; the loss is not divided by the accumulation steps there. The prompt model is reduced to an MLP classifier with one AdamW and a constant schedule; gradient_accumulation_steps = 4. The twin moves the step inside the if as the issue proposes and divides each loss by the accumulation steps (with the step inside the if alone, each window would sum four mean losses)
family: misplaced-step
shape: AdamW(lr=1e-3), clip 1.0, gradient_accumulation_steps = 4; 12 micro-batches of 8
numeric: 12 steps of one micro-batch each instead of 3 steps on windows of 4
watch: out: every step applies its own micro-batch's gradient once and clears it; where the accumulation test should sit is the program's intent
lint: out: a step outside the accumulation test is an ordinary one-batch training loop; that an accumulation was meant is the program's intent
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb

gradient_accumulation_steps = 4
_gb.setup()
prompt_model = torch.nn.Sequential(torch.nn.Linear(24, 32), torch.nn.Tanh(), torch.nn.Linear(32, 3))
_gb.start(prompt_model)
optimizer1 = torch.optim.AdamW(prompt_model.parameters(), lr=1e-3)
train_dataloader = [(torch.randn(8, 24), torch.randint(0, 3, (8,))) for _ in range(12)]
actual_step, glb_step, tot_loss = 0, 0, 0.0
for step, (inputs, labels) in enumerate(train_dataloader):
    logits = prompt_model(inputs)
    loss = F.cross_entropy(logits, labels)
    # FIX: loss = loss / gradient_accumulation_steps
    loss.backward()
    tot_loss += loss.item()
    actual_step += 1
    if actual_step % gradient_accumulation_steps == 0:
        torch.nn.utils.clip_grad_norm_(prompt_model.parameters(), 1.0)
        glb_step += 1
        # FIX: optimizer1.step()
        # FIX: optimizer1.zero_grad()
    optimizer1.step()  # BUG
    optimizer1.zero_grad()  # BUG
_gb.done(prompt_model)
