"""README, "Exact accumulation": the Accumulator loop with token counts, checked against the full batch.

Run: python examples/exact_accumulation.py   (CPU, a few seconds)
"""
import torch
import torch.nn.functional as F

import gradguard as gg

torch.manual_seed(0)
VOCAB, STEPS = 17, 4


class TinyLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, 8)
        self.head = torch.nn.Linear(8, VOCAB)

    def forward(self, input_ids):
        return self.head(self.embed(input_ids))


def make_batch(rows, length):
    """Token ids with a random number of padded (ignored, -100) label positions per row."""
    input_ids = torch.randint(0, VOCAB, (rows, length))
    labels = input_ids.roll(-1, dims=1)
    for r in range(rows):
        labels[r, torch.randint(1, length + 1, ()).item():] = -100
    return {"input_ids": input_ids, "labels": labels}


# micro-batches of different sizes and token counts: divide-by-K would weight them wrongly
loader = [make_batch(rows, length) for rows, length in [(2, 5), (3, 7), (1, 9), (4, 3)] * 2]
model = TinyLM().double()
reference = TinyLM().double()
reference.load_state_dict(model.state_dict())
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)

# --- the README's loop, as written there ---
acc = gg.Accumulator(optimizer, steps=STEPS, scheduler=scheduler, max_grad_norm=1.0)
for batch in loader:                                   # one micro-batch per iteration
    logits = model(batch["input_ids"])
    loss = torch.nn.functional.cross_entropy(
        logits.flatten(0, 1), batch["labels"].flatten(), ignore_index=-100)
    acc.backward(loss, count=(batch["labels"] != -100).sum())   # items this mean ran over
    if acc.step():                                     # True when the optimizer stepped
        print(f"step {acc.optimizer_steps}: loss {acc.loss:.4f}")
acc.flush()                                            # the final partial window, exact weights

# --- the same two steps with one full batch per step (the mean over every target token) ---
ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
ref_sched = torch.optim.lr_scheduler.StepLR(ref_opt, step_size=1, gamma=0.5)
for window in (loader[:STEPS], loader[STEPS:]):
    ref_opt.zero_grad()
    logits = torch.cat([reference(b["input_ids"]).flatten(0, 1) for b in window])
    labels = torch.cat([b["labels"].flatten() for b in window])
    F.cross_entropy(logits, labels, ignore_index=-100).backward()
    torch.nn.utils.clip_grad_norm_(reference.parameters(), 1.0)
    ref_opt.step()
    ref_sched.step()
for p, q in zip(model.parameters(), reference.parameters()):
    torch.testing.assert_close(p, q, rtol=1e-12, atol=1e-12)
print("the accumulated run matches full-batch training (float64)")
