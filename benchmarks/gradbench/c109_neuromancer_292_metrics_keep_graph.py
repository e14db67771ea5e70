"""NeuroMANCER Trainer: each epoch's training losses are kept as live tensors, stacked into the epoch's mean and handed to the logger, so the graphs of the batches stay in memory.

source: pnnl/neuromancer#292 (https://github.com/pnnl/neuromancer/pull/292), "Fixing leaking autograd graph memory in Trainer" (merged): "Trainer has two memory leaks, both from the same source, we're not detaching the grad graphs from the metrics before we store them ... No longer storing hundreds of MB or a few GB of autograd graph on accident per long training run!". Code read (src/neuromancer/trainer.py before the fix): losses.append(output[self.train_metric]) after each step; output[f'mean_{self.train_metric}'] = torch.mean(torch.stack(losses)); ... self.logger.log_metrics(output, step=i). The twin detaches the metric before storing it
family: graph-logging
shape: for i in range(epochs): self.model.train(); losses = []; for t_batch in self.train_data: output = self.model(t_batch); self.optimizer.zero_grad(); output[self.train_metric].backward(); clip_grad_norm_(self.model.parameters(), self.clip); self.optimizer.step(); losses.append(output[self.train_metric]); output[f'mean_{self.train_metric}'] = torch.mean(torch.stack(losses)); self.logger.log_metrics(output, step=i) (a logger that keeps every epoch's metrics)
numeric: the logged epoch means reach the graph of every training batch of the run
watch: out: logged metrics hold graph nodes, not gradient; the watch follows .grad
lint: out: the loss is kept by a list append and a stack, not an arithmetic sum (the rule looks for sums)
bug-step: end
"""
import torch
import torch.nn.functional as F

import _gb


class Problem(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.policy = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))

    def forward(self, data):
        u = self.policy(data["x"])
        return {"train_loss": F.mse_loss(u, data["x"][:, :2] * 0.5), "u": u}


class BasicLogger:
    def __init__(self):
        self.history = []

    def log_metrics(self, output, step=None):
        self.history.append({k: v for k, v in output.items() if k.startswith("mean_")})


class Trainer:
    def __init__(self, model, train_data, optimizer, epochs=3, clip=100.0, logger=None, train_metric="train_loss"):
        self.model, self.train_data, self.optimizer = model, train_data, optimizer
        self.epochs, self.clip, self.logger, self.train_metric = epochs, clip, logger, train_metric

    def train(self):
        for i in range(self.epochs):
            self.model.train()
            losses = []
            for t_batch in self.train_data:
                t_batch["epoch"] = i
                output = self.model(t_batch)
                self.optimizer.zero_grad()
                output[self.train_metric].backward()
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
                self.optimizer.step()
                losses.append(output[self.train_metric])  # BUG
                # FIX: losses.append(output[self.train_metric].detach())
            output[f"mean_{self.train_metric}"] = torch.mean(torch.stack(losses))
            if self.logger is not None:
                self.logger.log_metrics(output, step=i)


_gb.setup()
problem = Problem()
_gb.start(problem)
logger = BasicLogger()
train_data = [{"x": torch.randn(8, 4)} for _ in range(6)]
Trainer(problem, train_data, torch.optim.AdamW(problem.parameters(), lr=1e-3), logger=logger).train()
_gb.done(problem, kept=[m["mean_train_loss"] for m in logger.history])
