"""GG201: totals that keep nothing alive across iterations, read from what the program computes.

A total bound afresh on every path of one iteration (a sum over the model's heads, reset per batch),
one whose loop is the unrolled forward pass of an update back-propagated right after it (a local of
that function, bound before the loop), a number scaled by a hyperparameter entry
(``cfg["w"] * loss.item()``), a list bound afresh by a function that is one update (its loop
iterates over the optimizers it steps, on one batch), and a name bound again after
the backward pass from a metrics object: none links more than one iteration's graphs. Each program
is run: the truth is how many batches' inputs the total still reaches through its autograd graph at
the end (more than one: kept across iterations). Negative controls: the buggy twin of each (the
total bound once outside the loop, an attribute that outlives the call, no rebinding, a list of a
loop over batches) is still reported.
"""

from __future__ import annotations

import re
import textwrap

import pytest
import torch

from _findings import codes

HEADS = """\
import torch


def train(model, data, optimizer, seen):
    running = 0.0
    for x, y in data:
        optimizer.zero_grad()
        outs = [model(x), model(x * 2)]
        loss = 0
        c_loss_all = 0
        for out in outs:
            c_loss = ((out - y) ** 2).mean()
            loss += c_loss
            c_loss_all += c_loss
        running += c_loss_all.item()
        loss.backward()
        optimizer.step()
    seen(c_loss_all)
"""
# bound afresh each iteration, but then kept in a list that outlives it: every batch's graph stays linked
HEADS_KEPT_BAD = HEADS.replace("    running = 0.0\n", "    running = 0.0\n    history = []\n").replace(
    "        running += c_loss_all.item()\n", "        running += c_loss_all.item()\n        history.append(c_loss_all)\n").replace(
    "    seen(c_loss_all)", "    seen(history)")
HEADS_BAD = HEADS.replace("        c_loss_all = 0\n", "").replace("    running = 0.0\n", "    running = 0.0\n    c_loss_all = 0\n")

UNROLLED = """\
import torch


def update(model, optimizer, x, y, seen):
    reg_loss = 0
    aux_loss = 0
    outs = []
    for t in range(x.shape[0]):
        out = model(x[t:t + 1])
        outs.append(out)
        step_loss = (out ** 2).mean()
        reg_loss += step_loss
        aux_step_loss = out.abs().mean()
        aux_loss += aux_step_loss
    reg_loss /= x.shape[0]
    loss = ((torch.cat(outs) - y) ** 2).mean()
    loss += reg_loss
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    seen(aux_loss)


def train(model, data, optimizer, seen):
    for x, y in data:
        update(model, optimizer, x, y, seen)
"""
# the total is an attribute of the model: it outlives the call, each update adds into it
UNROLLED_BAD = UNROLLED.replace("    aux_loss = 0\n", "").replace("aux_loss", "model.aux_loss").replace(
    "def train(model, data, optimizer, seen):\n", "def train(model, data, optimizer, seen):\n    model.aux_loss = 0\n")
# the loop computes nothing that is back-propagated: an evaluation, whose total links every batch
EVAL_THEN_UPDATE_BAD = """\
import torch


def train(model, data, optimizer, seen):
    val_loss = 0
    for x, y in data:
        loss = ((model(x) - y) ** 2).mean()
        val_loss += loss
    seen(val_loss)
    x, y = data[0]
    loss = ((model(x) - y) ** 2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""

WEIGHTED_NUMBER = """\
import torch


def train(model, data, optimizer, seen):
    cfg = {"loc_weight": 2.0}
    total_r_loss = 0
    for x, y in data:
        r_loss = ((model(x) - y) ** 2).mean()
        loss = cfg["loc_weight"] * r_loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total_r_loss += cfg["loc_weight"] * r_loss.item()
    seen(total_r_loss)
"""
WEIGHTED_NUMBER_BAD = WEIGHTED_NUMBER.replace("r_loss.item()", "r_loss")

REBOUND = """\
import torch


class Meter:
    def __init__(self):
        self.values = (0.0, 0.0)

    def update(self, values):
        self.values = tuple(values)

    def get_stats(self):
        return self.values


def train(model, data, optimizer, seen):
    metrics = Meter()
    avg_p_loss = 0.0
    for x, y in data:
        p_loss = ((model(x) - y) ** 2).mean()
        c_loss = (model(x) ** 2).mean()
        optimizer.zero_grad()
        metrics.update([p_loss.item(), c_loss.item()])
        (p_loss + c_loss).backward()
        optimizer.step()
        (p_loss, c_loss) = metrics.get_stats()
        avg_p_loss += p_loss
    seen(avg_p_loss)
"""
REBOUND_BAD = REBOUND.replace("        (p_loss, c_loss) = metrics.get_stats()\n", "")

# a loop over the optimizers it steps, on one batch: one pass and one step per optimizer
PER_OPTIMIZER = """\
import torch


class Trainer:
    def __init__(self, model, optimizers):
        self.model, self.optimizers = model, optimizers

    def run_batch(self, x, y):
        all_losses = []
        for opt_idx, optimizer in enumerate(self.optimizers):
            loss = ((self.model(x) - y) ** 2).mean() * (opt_idx + 1)
            loss.backward()
            all_losses.append(loss)
            optimizer.step()
            optimizer.zero_grad()
        return all_losses


def train(model, data, optimizer, seen):
    opts = [torch.optim.SGD([model.weight], lr=0.01), torch.optim.SGD([model.bias], lr=0.01)]
    trainer = Trainer(model, opts)
    for x, y in data:
        seen(trainer.run_batch(x, y))
"""
# the same list in a loop over the batches of an epoch, stepping every optimizer each batch
PER_OPTIMIZER_BAD = PER_OPTIMIZER.replace("""    def run_batch(self, x, y):
        all_losses = []
        for opt_idx, optimizer in enumerate(self.optimizers):
            loss = ((self.model(x) - y) ** 2).mean() * (opt_idx + 1)
            loss.backward()
            all_losses.append(loss)
            optimizer.step()
            optimizer.zero_grad()
        return all_losses
""", """    def run_epoch(self, data):
        all_losses = []
        for x, y in data:
            loss = ((self.model(x) - y) ** 2).mean()
            loss.backward()
            all_losses.append(loss)
            for optimizer in self.optimizers:
                optimizer.step()
                optimizer.zero_grad()
        return all_losses
""").replace("""    for x, y in data:
        seen(trainer.run_batch(x, y))""", """    seen(trainer.run_epoch(data))""")

GOOD = {"heads": HEADS, "unrolled": UNROLLED, "weighted-number": WEIGHTED_NUMBER, "rebound": REBOUND,
        "per-optimizer": PER_OPTIMIZER}
BAD = {"heads": HEADS_BAD, "heads-kept-in-a-list": HEADS_KEPT_BAD, "unrolled": UNROLLED_BAD, "eval-then-update": EVAL_THEN_UPDATE_BAD,
       "weighted-number": WEIGHTED_NUMBER_BAD, "rebound": REBOUND_BAD,
       "per-optimizer": PER_OPTIMIZER_BAD}


def _gg201(source):
    return [c for c in codes(source) if c == "GG201"]


def _batches_linked(source) -> int:
    """Run the program; how many batches' inputs the total it hands to ``seen`` still reaches through
    its autograd graph at the end (0 for a number)."""
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


@pytest.mark.parametrize("form", sorted(GOOD))
def test_a_total_that_links_one_iteration_at_most_is_not_reported(form):
    assert _batches_linked(GOOD[form]) <= 1
    assert _gg201(GOOD[form]) == []


@pytest.mark.parametrize("form", sorted(BAD))
def test_negative_control_a_total_kept_across_iterations_is_still_reported(form):
    assert BAD[form] not in GOOD.values()
    assert _batches_linked(BAD[form]) == 3
    assert _gg201(BAD[form]) == ["GG201"]


def _rewrite(source: str) -> str:
    """Rename the user's names (keeping what each says it is) and move the loss into a helper."""
    # (the candidate evaluation loops are found by a first text pass over `+=` lines that mention a
    # loss: the new names keep that word)
    for old, new in (("c_loss_all", "head_loss_sum"), ("c_loss", "head_loss"), ("aux_loss", "side_loss"),
                     ("reg_loss", "penalty_loss"), ("total_r_loss", "box_loss_sum"), ("r_loss", "box_loss"),
                     ("avg_p_loss", "plan_loss_sum"), ("p_loss", "plan_loss"), ("metrics", "tracker"),
                     ("outs", "heads_out"), ("optimizer", "opt"), ("model", "net"), ("cfg", "hp"),
                     ("all_losses", "loss_log"), ("run_batch", "fit_one"), ("opt_idx", "k")):
        source = re.sub(rf"\b{old}\b", new, source)
    helper = "\n\ndef sq_err(a, b):\n    return ((a - b) ** 2).mean()\n"
    return source.replace("((out - y) ** 2).mean()", "sq_err(out, y)").replace(
        "((net(x) - y) ** 2).mean()", "sq_err(net(x), y)").replace("import torch\n", "import torch\n" + helper, 1)


@pytest.mark.parametrize("form", sorted(GOOD))
def test_renamed_and_refactored_programs_keep_their_verdicts(form):
    good, bad = _rewrite(GOOD[form]), _rewrite(BAD[form])
    assert good != GOOD[form] and bad != BAD[form]
    assert _batches_linked(good) <= 1 and _batches_linked(bad) == 3
    assert _gg201(good) == []
    assert _gg201(bad) == ["GG201"]
