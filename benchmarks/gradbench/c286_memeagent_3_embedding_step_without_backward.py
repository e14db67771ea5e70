"""memeagent's episodic-novelty module: the embedding network's update calls `opt.zero_grad()`, computes the inverse-dynamics loss and calls `opt.step()`, with no `loss.backward()` between them, so the embedding network (which the intrinsic reward is computed from) is never trained.

source: YHL04/memeagent#3 (https://github.com/YHL04/memeagent/issues/3), open: the report that the episodic novelty module's update has no backward call (the same code is in YHL04/agent57). The update is written from the report: an embedding network over observations, an inverse-dynamics head predicting the action from the embeddings of consecutive observations, cross-entropy on the actions; sizes are small, the optimizer is Adam. The twin calls loss.backward() before the step
family: missing-backward
shape: Adam(lr=5e-4), observations of 16 features, 4 actions, 5 updates of 32 transitions
numeric: the bug never updates the embedding network or the head
watch: GG110
lint: out: a loss computed and never backpropagated is ordinary code; nothing connects it to the step that follows
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class EpisodicNovelty(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
        self.classifier = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))

    def forward(self, obs, next_obs):
        return self.classifier(torch.cat([self.embedding(obs), self.embedding(next_obs)], dim=1))


_gb.setup()
model = EpisodicNovelty()
_gb.start(model)
opt = torch.optim.Adam(model.parameters(), lr=5e-4)
for update in range(5):
    obs, next_obs, actions = torch.randn(32, 16), torch.randn(32, 16), torch.randint(0, 4, (32,))
    opt.zero_grad()
    loss = F.cross_entropy(model(obs, next_obs), actions)
    # FIX: loss.backward()
    opt.step()
_gb.done(model)
