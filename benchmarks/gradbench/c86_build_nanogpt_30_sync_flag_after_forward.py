"""build-nanogpt train_gpt2.py: require_backward_grad_sync is set after the forward pass, so DDP never all-reduces the window's last micro-batch.

source: karpathy/build-nanogpt#30 (https://github.com/karpathy/build-nanogpt/pull/30), "fix sync issue that results in incorrect gradient accumulation and incorrect loss" (merged): "both the forward and backward pass need `require_backward_grad_sync=true` set in order to sync correctly"; karpathy: "... TIL. I think nanoGPT is broken too, then."
family: ddp-no-sync
shape: for micro_step in range(grad_accum_steps): logits, loss = model(x, y); loss = loss / grad_accum_steps; if ddp: model.require_backward_grad_sync = (micro_step == grad_accum_steps - 1); loss.backward(); then optimizer.step(). DDP arms its all-reduce in forward, so the flag set before backward comes one micro-step late: the last micro-batch's backward does not synchronise (only the next step's first one does). Fixed: the flag set before the forward. Two gloo ranks on CPU: this process is rank 0, a spawned process is rank 1
numeric: each rank steps with mostly its own micro-batches' gradients: the two ranks' weights drift apart and neither follows the global batch
watch: out: the all-reduce happens inside DDP's reducer; the watch sees one rank's .grad, not whether the ranks agree
lint: out: no rule covers when DDP's sync flag is set relative to the forward pass
bug-step: 1
"""
import os
import tempfile

import torch
import torch.distributed as dist
import torch.nn.functional as F

import _gb

grad_accum_steps = 2


class GPT(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = torch.nn.Embedding(16, 8)
        self.lm_head = torch.nn.Linear(8, 16)

    def forward(self, idx, targets):
        logits = self.lm_head(torch.tanh(self.wte(idx)))
        return logits, F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def train(rank, init_file, world_size=2):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(GPT())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    if rank == 0:
        _gb.start(model.module)
    g = torch.Generator().manual_seed(100 + rank)
    for step in range(4):
        optimizer.zero_grad()
        for micro_step in range(grad_accum_steps):
            x = torch.randint(0, 16, (4, 6), generator=g)
            y = x.roll(-1, dims=1)
            # FIX: model.require_backward_grad_sync = (micro_step == grad_accum_steps - 1)
            logits, loss = model(x, y)
            loss = loss / grad_accum_steps
            model.require_backward_grad_sync = (micro_step == grad_accum_steps - 1)  # BUG
            loss.backward()
        optimizer.step()
    if rank == 0:
        _gb.done(model.module)
    dist.destroy_process_group()


def rank1(init_file):
    _gb.setup()  # the same dtype as rank 0
    train(1, init_file)


if __name__ == "__main__":
    _gb.setup()
    with tempfile.TemporaryDirectory(prefix="gradbench-ddp-") as folder:
        init_file = os.path.join(folder, "store")
        peer = torch.multiprocessing.get_context("spawn").Process(target=rank1, args=(init_file,))
        peer.start()
        train(0, init_file)
        peer.join()
