"""GG201: totals bounded by one update, read from what the program computes, whatever they are called.

Three shapes of real code whose total links the graphs of one update only, each run here:

* bound afresh (``torch.zeros(n)``) at the top of each iteration of the loop that steps, then added to
  in a nested loop that back-propagates one pass per feature extractor into that one step (a noise
  vector optimised against several extractors);
* bound afresh at the top of a ``train_step`` method whose micro-step loop (``for _ in range(K)``)
  back-propagates K passes into the one step after it, returned, and only read by the caller;
* a list bound afresh by a per-agent update whose loop steps each agent's own optimizer
  (``self.opts[agent].step()``), returned and overwritten by the caller;
* a list bound afresh at each update, filled by a loop over the pieces that iteration split its batch
  into (``pieces = subdivide(x, y)``; ``for xc, yc in pieces``);
* a list bound afresh at each batch, filled by a loop over the heads and the optimizers it steps
  (``for head, opt in zip(heads, opts)``: each optimizer steps once per batch);
* an attribute (``self.loss_ds = []``) bound afresh by each call of a method whose counted loop
  back-propagates one pass per head into the step its caller makes after the call.

The truth is how many batches' inputs the total the program hands to ``seen`` still reaches through
its autograd graph at the end (one: it dies with its update; three: it is kept across updates).
Negative controls (each still reported, each linking all three batches): the total bound once outside
the loop that steps; the caller adding the returned total into a running total of its own; the same
``train_step`` looping over a whole data loader before one step (an LBFGS-closure-like pass, whose total
links every batch); the per-agent list extended into a history by the caller; the attribute bound once, when the object is built; the list of pieces bound once before the loop over batches.
Every program is also checked renamed (no name says "loss"), with the loss in a helper.
"""

from __future__ import annotations

import re
import textwrap

import pytest
import torch

from _findings import codes

NOISE = """\
import torch


def train(model, data, optimizer, seen):
    extractors = [lambda v: v * 2.0, lambda v: v - 1.0]
    for x, y in data:
        out = model(x)
        sum_loss = torch.zeros(out.shape[0])
        reg = ((out ** 2).mean(dim=1) - 1) ** 2
        sum_loss += reg
        reg.sum().backward(retain_graph=True)
        for i in range(len(extractors)):
            diff = (extractors[i](out) - y) ** 2
            loss = diff.mean(dim=1)
            sum_loss += loss
            loss.sum().backward(retain_graph=i != len(extractors) - 1)
        optimizer.step()
        optimizer.zero_grad()
        best = sum_loss.min().item()
    seen(sum_loss)
"""
# bound once before the loop that steps: every iteration adds into it
NOISE_BAD = NOISE.replace("        sum_loss = torch.zeros(out.shape[0])\n", "").replace(
    "    for x, y in data:\n", "    sum_loss = torch.zeros(4)\n    for x, y in data:\n", 1)

WINDOW = """\
import torch


class Trainer:
    def __init__(self, model, optimizer, accumulate):
        self.model, self.optimizer, self.accumulate = model, optimizer, accumulate

    def train_step(self, x, y):
        total_loss = 0
        for _ in range(self.accumulate):
            loss = ((self.model(x) - y) ** 2).mean() / self.accumulate
            total_loss += loss
            loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad()
        return total_loss


def train(model, data, optimizer, seen):
    trainer = Trainer(model, optimizer, 2)
    for x, y in data:
        loss = trainer.train_step(x, y)
        shown = f"{loss.item():.3f}"
    seen(loss)
"""
# the caller keeps a running total of what each update returns
WINDOW_CALLER_BAD = WINDOW.replace("        loss = trainer.train_step(x, y)\n", "        loss = trainer.train_step(x, y)\n        epoch += loss\n").replace(
    "    trainer = Trainer(model, optimizer, 2)\n", "    trainer = Trainer(model, optimizer, 2)\n    epoch = 0\n").replace("    seen(loss)", "    seen(epoch)")
# the "window" is a whole data loader: one step after every batch's pass, the total links every batch
WINDOW_LOADER_BAD = """\
import torch


class Trainer:
    def __init__(self, model, optimizer):
        self.model, self.optimizer = model, optimizer

    def train_step(self, batches):
        total_loss = 0
        for x, y in batches:
            loss = ((self.model(x) - y) ** 2).mean() / len(batches)
            total_loss += loss
            loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad()
        return total_loss


def train(model, data, optimizer, seen):
    trainer = Trainer(model, optimizer)
    loss = trainer.train_step(data)
    shown = f"{loss.item():.3f}"
    seen(loss)
"""

PER_AGENT = """\
import torch


class Agents:
    def __init__(self, model):
        self.model = model
        self.opts = [torch.optim.SGD([model.weight], lr=0.01), torch.optim.SGD([model.bias], lr=0.01)]

    def update_policy(self, x, y):
        c_loss = []
        for agent in range(len(self.opts)):
            self.opts[agent].zero_grad()
            loss_q = ((self.model(x) - y) ** 2).mean() * (agent + 1)
            loss_q.backward()
            self.opts[agent].step()
            c_loss.append(loss_q)
        return c_loss


def train(model, data, optimizer, seen):
    agents = Agents(model)
    for x, y in data:
        c_loss = agents.update_policy(x, y)
    seen(c_loss)
"""
# the caller keeps every update's list
PER_AGENT_BAD = PER_AGENT.replace("        c_loss = agents.update_policy(x, y)\n", "        c_loss = agents.update_policy(x, y)\n        history.extend(c_loss)\n").replace(
    "    agents = Agents(model)\n", "    agents = Agents(model)\n    history = []\n").replace("    seen(c_loss)", "    seen(history)")

# an attribute bound afresh by each call of a method whose counted loop back-propagates one pass per
# head into the step its caller makes after it
PER_CALL_ATTRIBUTE = """\
import torch


class Retarget:
    def __init__(self, model, optimizer, heads):
        self.model, self.optimizer, self.heads = model, optimizer, heads

    def backward_d(self, x, y):
        self.loss_ds = []
        self.loss_d = 0
        for i in range(self.heads):
            loss = ((self.model(x) * (i + 1) - y) ** 2).mean()
            loss.backward()
            self.loss_ds.append(loss)
            self.loss_d += self.loss_ds[-1]

    def optimize(self, x, y):
        self.optimizer.zero_grad()
        self.backward_d(x, y)
        self.optimizer.step()


def train(model, data, optimizer, seen):
    r = Retarget(model, optimizer, 2)
    for x, y in data:
        r.optimize(x, y)
    seen(r.loss_ds)
"""
# bound once when the object is built: every call appends to the same list
PER_CALL_ATTRIBUTE_BAD = PER_CALL_ATTRIBUTE.replace("        self.loss_ds = []\n", "").replace(
    "        self.model, self.optimizer, self.heads = model, optimizer, heads\n",
    "        self.model, self.optimizer, self.heads = model, optimizer, heads\n        self.loss_ds = []\n")

# a list bound afresh at each update, filled by a loop over the pieces this iteration split its batch into
CHUNKS = """\
import torch


def subdivide(x, y, n):
    return list(zip(x.split(n), y.split(n)))


def train(model, data, optimizer, seen):
    for x, y in data:
        pieces = subdivide(x, y, 2)
        optimizer.zero_grad()
        losses = []
        for xc, yc in pieces:
            loss = ((model(xc) - yc) ** 2).mean() / len(pieces)
            losses.append(loss)
            loss.backward()
        optimizer.step()
        shown = sum(losses).item()
    seen(losses)
"""
# bound once before the loop over batches: every update's pieces stay in it
CHUNKS_BAD = CHUNKS.replace("        losses = []\n", "").replace("    for x, y in data:\n", "    losses = []\n    for x, y in data:\n", 1)

# a list bound afresh at each batch, filled by a loop over the heads and the optimizers it steps, one each
HEADS_PER_OPTIMIZER = """\
import torch


def train(model, data, optimizer, seen):
    heads = [torch.nn.Linear(1, 1), torch.nn.Linear(1, 1)]
    opts = [torch.optim.SGD(h.parameters(), lr=0.01) for h in heads]
    for x, y in data:
        feats = model(x)
        losses = []
        for head, opt in zip(heads, opts):
            loss = ((head(feats) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward(retain_graph=True)
            opt.step()
            losses.append(loss)
        shown = [v.item() for v in losses]
    seen(losses)
"""
# bound once before the loop over batches
HEADS_PER_OPTIMIZER_BAD = HEADS_PER_OPTIMIZER.replace("        losses = []\n", "").replace(
    "    for x, y in data:\n", "    losses = []\n    for x, y in data:\n", 1)

GOOD = {"heads-per-optimizer": HEADS_PER_OPTIMIZER, "chunks": CHUNKS, "noise": NOISE, "window": WINDOW, "per-agent": PER_AGENT, "per-call-attribute": PER_CALL_ATTRIBUTE}
BAD = {"heads-per-optimizer": HEADS_PER_OPTIMIZER_BAD, "chunks": CHUNKS_BAD, "noise": NOISE_BAD, "window-caller": WINDOW_CALLER_BAD, "window-loader": WINDOW_LOADER_BAD, "per-agent": PER_AGENT_BAD,
       "per-call-attribute": PER_CALL_ATTRIBUTE_BAD}
TWIN = {"heads-per-optimizer": "heads-per-optimizer", "chunks": "chunks", "noise": "noise", "window": "window-caller", "per-agent": "per-agent", "per-call-attribute": "per-call-attribute"}


def _gg201(source):
    return [c for c in codes(source) if c == "GG201"]


def _batches_linked(source) -> int:
    """Run the program; how many batches' inputs what it hands to ``seen`` still reaches through its
    autograd graph at the end (0 for a number)."""
    namespace = {}
    exec(compile(textwrap.dedent(source), "<train>", "exec"), namespace)
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(4, 3, generator=g).requires_grad_(), torch.randn(4, 1, generator=g)) for _ in range(3)]
    held = []
    namespace["train"](model, data, torch.optim.SGD(model.parameters(), lr=0.01), held.append)
    total = held[-1]
    inputs = {id(x) for x, _ in data}
    totals = total if isinstance(total, list) else [total]
    reached, pending, seen = set(), [getattr(t, "grad_fn", None) for t in totals], set()
    while pending:
        fn = pending.pop()
        if fn is None or id(fn) in seen:
            continue
        seen.add(id(fn))
        variable = getattr(fn, "variable", None)
        if variable is not None and id(variable) in inputs:
            reached.add(id(variable))
        pending.extend(f for f, _ in fn.next_functions)
    return len(reached)


def _rewrite(source: str) -> str:
    """Rename every user name (none of the new ones says "loss"), move the error into a helper."""
    for old, new in (("opts", "updaters"), ("opt", "u"), ("heads", "probes"), ("head", "probe"), ("feats", "h"),
                     ("loss_ds", "parts"), ("loss_d", "part_sum"), ("backward_d", "fit_heads"), ("Retarget", "Multi"),
                     ("sum_loss", "acc"), ("losses", "parts_kept"), ("pieces", "bits"), ("subdivide", "cut"), ("total_loss", "running"), ("c_loss", "per_agent"), ("loss_q", "q_err"),
                     ("loss", "objective"), ("train_step", "fit_once"), ("update_policy", "improve"),
                     ("Trainer", "Runner"), ("Agents", "Team"), ("optimizer", "opt"), ("model", "net"),
                     ("extractors", "views"), ("agent", "k"), ("epoch", "kept"), ("history", "kept_lists")):
        source = re.sub(rf"\b{old}\b", new, source)
    helper = "\n\ndef sq_err(a, b):\n    return (a - b) ** 2\n"
    source = source.replace("((self.net(x) - y) ** 2)", "sq_err(self.net(x), y)").replace(
        "(views[i](out) - y) ** 2", "sq_err(views[i](out), y)")
    return source.replace("import torch\n", "import torch\n" + helper, 1)


@pytest.mark.parametrize("form", sorted(GOOD))
def test_a_total_bounded_by_one_update_is_not_reported(form):
    assert _batches_linked(GOOD[form]) == 1
    assert _gg201(GOOD[form]) == []


@pytest.mark.parametrize("form", sorted(BAD))
def test_negative_control_a_total_kept_across_updates_is_still_reported(form):
    assert _batches_linked(BAD[form]) == 3
    assert "GG201" in _gg201(BAD[form])


@pytest.mark.parametrize("form", sorted(GOOD))
def test_renamed_and_refactored_programs_keep_their_verdicts(form):
    good, bad = _rewrite(GOOD[form]), _rewrite(BAD[TWIN[form]])
    assert "loss" not in good and "loss" not in bad
    assert _batches_linked(good) == 1 and _batches_linked(bad) == 3
    assert _gg201(good) == []
    assert "GG201" in _gg201(bad)
