"""fairchem (OCP) force training under data parallelism: each replica averages its energy/force loss over its own atoms and the distributed gradient reduction then averages the replicas, so replicas holding different numbers of atoms (and systems) weigh their atoms differently; the fix aggregates the number of atoms of all replicas and averages over it.

source: facebookresearch/fairchem#269 (https://github.com/facebookresearch/fairchem/pull/269), "Correctly calculate distributed loss average" (merged): "We previously first calculated the loss average per DDP replica and then averaged across replicas. This leads to wrong results since not every replica has the same number of atoms or even systems. This PR changes the computation to instead calculate an average over all replicas by aggregating the number of samples." The trainer was not read. Two replicas are run in one process as DDP computes them (each replica's loss divided by the world size, the all-reduce mean, into one step); the graph network is reduced to a per-atom MLP predicting forces from 8 atom features; the replicas hold 6 and 42 atoms. The twin sums each replica's per-atom loss and divides by the atom count of all replicas over the world size, the pull request's average
family: mean-of-means
shape: Adam(lr=1e-3), 2 replicas with 6 and 42 atoms; 4 steps
numeric: every step weighs an atom of the 6-atom replica 7x an atom of the 42-atom one
watch: GG105
lint: out: the atom counts of the replicas are data, unknown before run time
bug-step: 1
"""
import torch

import _gb

world_size = 2
_gb.setup()
model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.SiLU(), torch.nn.Linear(32, 3))
_gb.start(model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
steps = [[(torch.randn(n, 8), torch.randn(n, 3)) for n in (6, 42)] for _ in range(4)]
for replicas in steps:
    natoms_total = sum(atoms.shape[0] for atoms, _ in replicas)
    optimizer.zero_grad()
    for atoms, force_target in replicas:
        per_atom = ((model(atoms) - force_target) ** 2).sum(dim=1)
        loss = per_atom.mean()  # BUG
        # FIX: loss = per_atom.sum() * world_size / natoms_total
        (loss / world_size).backward()  # DDP averages the replicas' gradients
    optimizer.step()
_gb.done(model)
