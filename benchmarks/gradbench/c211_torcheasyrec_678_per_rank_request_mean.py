"""TorchEasyRec's list-wise rank loss under data parallelism: `RankModel._loss_impl` gated the rescale that turns each rank's per-request average into a global one on `getattr(self._base_model_config, "enable_global_average_loss", False)`, a field the outer config does not define, so the rescale never ran: each rank averages the list-wise loss over its own request count and the cross-rank gradient average is biased whenever the ranks hold different numbers of requests.

source: alibaba/TorchEasyRec#678 (https://github.com/alibaba/TorchEasyRec/pull/678), "[bugfix] apply enable_global_average_loss to the list-wise rank loss" (merged): "So the rescale was dead code. Under DDP the list-wise term averaged over each rank's own request count and the cross-rank gradient average came out biased whenever those counts differ — which cost-based batching ... makes routine". The model code was not read: the list-wise loss is a softmax cross entropy over each request's candidate items, averaged per rank; two ranks are run in one process as DDP computes them (each rank's loss divided by the world size into one step); the ranking model is reduced to an MLP scorer; the ranks hold 2 and 9 requests of 5 items. The twin applies the rescale (each rank's summed loss times the world size over the global request count), the pull request's enabled branch
family: mean-of-means
shape: Adam(lr=1e-3), 2 ranks with 2 and 9 requests of 5 candidate items; 4 steps
numeric: every step weighs a request of the 2-request rank 4.5x a request of the 9-request one
watch: GG105
lint: out: the request counts of the ranks are data, unknown before run time
bug-step: 1
"""
import torch
import torch.nn.functional as F

import _gb


class ModelConfig:
    """The outer model-config envelope: it does not define enable_global_average_loss (the HSTU message does)."""


world_size = 2
_gb.setup()
scorer = torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.ReLU(), torch.nn.Linear(24, 1))
_gb.start(scorer)
optimizer = torch.optim.Adam(scorer.parameters(), lr=1e-3)
base_model_config = ModelConfig()
enable_global_average_loss = True  # set on the HSTU model config
steps = [[(torch.randn(n, 5, 12), torch.randint(0, 5, (n,))) for n in (2, 9)] for _ in range(4)]
for ranks in steps:
    global_requests = sum(items.shape[0] for items, _ in ranks)
    optimizer.zero_grad()
    for items, clicked in ranks:
        logits = scorer(items).squeeze(-1)
        loss = F.cross_entropy(logits, clicked)
        if getattr(base_model_config, "enable_global_average_loss", False):  # BUG
        # FIX: if enable_global_average_loss:
            loss = loss * items.shape[0] * world_size / global_requests
        (loss / world_size).backward()  # DDP averages the ranks' gradients
    optimizer.step()
_gb.done(scorer)
