"""Values an iteration never changes, read by the window rules.

* GG112: a clip in the ``else`` of the same item flag (``hp["amp"]``) that chose a plain
  ``backward()`` over ``scaler.scale(loss).backward()``: the loop never stores that item, so the
  flag takes one side for the whole loop and the clip never follows a scaled backward.
* GG102: a clearing and a step under the same ``if self.accum_count == 1:``, the attribute set only
  by a method the loop never runs: the clearing runs only where each pass is stepped in the same
  iteration.
* GG105: a divisor counted completely (``n = 0; for ...: n += 1``) before the micro-step loop that
  divides by it: every micro-batch of that loop is divided by the same final count.

Each correct program is run in float64 against plain PyTorch on the whole batch; each has a true twin
(the flag stored in the loop, the attribute set by a method the loop calls, the count still growing
while the passes run) that must still be reported, and whose numbers are wrong.
"""

from __future__ import annotations

import torch

from _findings import codes


def _rule(source, code):
    return [c for c in codes(source) if c == code]


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 1)).double()


def _data(n, rows=5):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(rows, 4, generator=g, dtype=torch.float64), torch.randn(rows, 1, generator=g, dtype=torch.float64))
            for _ in range(n)]


def _flat(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _load(source, name):
    namespace = {}
    exec(compile(source, "<train>", "exec"), namespace)
    return namespace[name]


# ----------------------------------------------------------------------------------------- GG112
AMP_FLAG = """\
import torch


def train(model, optimizer, scaler, loader, hp):
    for step, (x, y) in enumerate(loader):
        loss = ((model(x) - y) ** 2).mean() / hp["accum"]
        if hp["amp"]:
            scaler.scale(loss).backward()
        else:
            loss.backward()
        if (step + 1) % hp["accum"] == 0:
            if hp["amp"]:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)
                scaler.step(optimizer)
                scaler.update()
            else:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)
                optimizer.step()
            optimizer.zero_grad()
"""


def _run_amp(source, amp):
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    _load(source, "train")(model, opt, scaler, _data(8), {"amp": amp, "accum": 2})
    return _flat(model)


def _reference_amp():
    """Plain PyTorch: each window's mean gradient, clipped to 0.05, one SGD step."""
    model = _model()
    data = _data(8)
    for s in range(0, 8, 2):
        xs = torch.cat([x for x, _ in data[s:s + 2]])
        ys = torch.cat([y for _, y in data[s:s + 2]])
        model.zero_grad()
        ((model(xs) - ys) ** 2).mean().backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.1 * p.grad
    return _flat(model)


def test_gg112_a_clip_under_the_other_side_of_an_item_flag_is_not_reported():
    assert _rule(AMP_FLAG, "GG112") == []
    reference = _reference_amp()
    assert torch.allclose(_run_amp(AMP_FLAG, False), reference, atol=1e-10)
    assert torch.allclose(_run_amp(AMP_FLAG, True), reference, atol=1e-6)


def test_gg112_renamed_and_in_a_helper_keep_the_verdict():
    renamed = AMP_FLAG.replace("hp", "cfg").replace('"amp"', '"use_fp16"').replace("scaler", "gs")
    assert _rule(renamed, "GG112") == []
    helper = AMP_FLAG.replace(
        "        if hp[\"amp\"]:\n            scaler.scale(loss).backward()\n        else:\n            loss.backward()\n",
        "        back(loss, scaler, hp)\n") + """

def back(loss, scaler, hp):
    if hp["amp"]:
        scaler.scale(loss).backward()
    else:
        loss.backward()
"""
    assert helper != AMP_FLAG and _rule(helper, "GG112") == []
    assert torch.allclose(_run_amp(helper, True), _reference_amp(), atol=1e-6)


def test_gg112_twin_the_loop_stores_the_flag_is_reported():
    bad = AMP_FLAG.replace("        if (step + 1) % hp",
                           "        hp[\"amp\"] = step % 2 == 0\n        if (step + 1) % hp")
    assert bad != AMP_FLAG and _rule(bad, "GG112") == ["GG112"]
    # the first window's plain backward meets a clip of gradients the second pass left scaled
    assert not torch.allclose(_run_amp(bad, True), _reference_amp(), atol=1e-3)


def test_gg112_twin_the_flag_handed_to_unknown_code_is_reported():
    bad = AMP_FLAG.replace("        if (step + 1) % hp", "        schedule.advance(hp)\n        if (step + 1) % hp")
    assert bad != AMP_FLAG and _rule(bad, "GG112") == ["GG112"]


# ----------------------------------------------------------------------------------------- GG102
SAME_TEST = """\
class Trainer:
    def __init__(self, model, optim, accum_count):
        self.model = model
        self.optim = optim
        self.accum_count = accum_count

    def set_count(self, count):
        self.accum_count = count

    def run(self, batches):
        if self.accum_count > 1:
            self.optim.zero_grad()
        for x, y in batches:
            if self.accum_count == 1:
                self.optim.zero_grad()
            loss = ((self.model(x) - y) ** 2).mean() / self.accum_count
            loss.backward()
            if self.accum_count == 1:
                self.optim.step()
        if self.accum_count > 1:
            self.optim.step()


def train(model, optim, batches, accum_count):
    Trainer(model, optim, accum_count).run(batches)
"""


def _run_trainer(source, k):
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    _load(source, "train")(model, opt, _data(3), k)
    return _flat(model)


def _reference_trainer(k):
    model = _model()
    data = _data(3)
    groups = [data] if k > 1 else [[b] for b in data]
    for group in groups:
        xs, ys = torch.cat([x for x, _ in group]), torch.cat([y for _, y in group])
        model.zero_grad()
        ((model(xs) - ys) ** 2).mean().backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.1 * p.grad
    return _flat(model)


def test_gg102_a_clear_and_a_step_under_one_unchanged_test_are_not_reported():
    assert _rule(SAME_TEST, "GG102") == []
    for k in (1, 3):
        assert torch.allclose(_run_trainer(SAME_TEST, k), _reference_trainer(k), atol=1e-10)


def test_gg102_renamed_keeps_the_verdict():
    renamed = SAME_TEST.replace("accum_count", "n_acc").replace("optim", "o").replace("set_count", "reset")
    assert _rule(renamed, "GG102") == []


def test_gg102_twin_a_method_the_loop_calls_changes_the_test_is_reported():
    bad = SAME_TEST.replace("            loss.backward()\n",
                            "            loss.backward()\n            self.set_count(1)\n")
    assert bad != SAME_TEST and _rule(bad, "GG102") == ["GG102"]
    # the count drops to 1 after the first pass: the second pass clears the first one's gradient
    assert not torch.allclose(_run_trainer(bad, 3), _reference_trainer(3), atol=1e-3)


def test_gg102_twin_the_loop_sets_the_attribute_is_reported():
    bad = SAME_TEST.replace("            loss.backward()\n",
                            "            loss.backward()\n            self.accum_count = 1\n")
    assert bad != SAME_TEST and _rule(bad, "GG102") == ["GG102"]


# ----------------------------------------------------------------------------------------- GG105
COUNTED_FIRST = """\
import torch


def train(model, optimizer, groups, micro):
    for _ in range(2):
        optimizer.zero_grad()
        for group in groups:
            valid = 0
            for start in range(0, len(group), micro):
                with torch.no_grad():
                    for x, y in group[start:start + micro]:
                        if torch.isfinite(x).all():
                            valid += 1
            for start in range(0, len(group), micro):
                part = group[start:start + micro]
                sub = sum(((model(x) - y) ** 2).mean() for x, y in part)
                (sub / float(valid) / len(groups)).backward()
        optimizer.step()
"""


def _groups():
    data = _data(10, rows=1)
    return [data[:4], data[4:10]]


def _run_groups(source):
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    _load(source, "train")(model, opt, _groups(), 3)
    return _flat(model)


def _reference_groups():
    """Plain PyTorch: the mean over groups of each group's mean loss, one step per pass over the groups."""
    model = _model()
    groups = _groups()
    for _ in range(2):
        model.zero_grad()
        loss = sum(torch.stack([((model(x) - y) ** 2).mean() for x, y in g]).mean() for g in groups) / len(groups)
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.1 * p.grad
    return _flat(model)


def test_gg105_a_count_completed_before_the_passes_is_not_reported():
    assert _rule(COUNTED_FIRST, "GG105") == []
    assert torch.allclose(_run_groups(COUNTED_FIRST), _reference_groups(), atol=1e-10)


def test_gg105_renamed_keeps_the_verdict():
    renamed = COUNTED_FIRST.replace("valid", "n_ok").replace("group", "chunk").replace("micro", "m")
    assert _rule(renamed, "GG105") == []


def test_gg105_twin_a_count_still_growing_while_the_passes_run_is_reported():
    # counted inside the loop that back-propagates: the first micro-batch is divided by 1, the next by 2, ...
    bad = COUNTED_FIRST.replace(
        "                part = group[start:start + micro]\n",
        "                part = group[start:start + micro]\n                valid += 1\n").replace(
        "            for start in range(0, len(group), micro):\n                with torch.no_grad():\n"
        "                    for x, y in group[start:start + micro]:\n                        if torch.isfinite(x).all():\n"
        "                            valid += 1\n", "")
    assert bad != COUNTED_FIRST and _rule(bad, "GG105") == ["GG105"]
    assert not torch.allclose(_run_groups(bad), _reference_groups(), atol=1e-3)


def test_gg105_twin_a_count_carried_across_groups_is_reported():
    # never reset per group: the second group's passes are divided by both groups' count
    bad = COUNTED_FIRST.replace("            valid = 0\n", "").replace(
        "        optimizer.zero_grad()\n", "        optimizer.zero_grad()\n        valid = 0\n")
    assert bad != COUNTED_FIRST and _rule(bad, "GG105") == ["GG105"]
    assert not torch.allclose(_run_groups(bad), _reference_groups(), atol=1e-3)


# ----------------------------------------------------------------------------------------- GG103
WHOLE_RUN = """\
def train(model, optimizer, loader, epochs):
    accum = 3
    total_micro_steps = epochs * 6
    for micro_step in range(total_micro_steps):
        x, y = loader[micro_step % len(loader)]
        loss = ((model(x) - y) ** 2).mean() / accum
        loss.backward()
        if (micro_step + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
"""


def _left_in_grad(source, epochs):
    """Whether the run leaves gradient no step applied (the oracle: a partial window dropped)."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    _load(source, "train")(model, opt, _data(4), epochs)
    return any(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in model.parameters())


def test_gg103_a_run_length_proved_a_multiple_of_the_window_is_not_reported():
    assert _rule(WHOLE_RUN, "GG103") == []
    assert not any(_left_in_grad(WHOLE_RUN, e) for e in (1, 2, 3))


def test_gg103_written_inline_and_renamed_keeps_the_verdict():
    inline = WHOLE_RUN.replace("    total_micro_steps = epochs * 6\n", "").replace(
        "range(total_micro_steps)", "range(6 * epochs)")
    assert inline != WHOLE_RUN and _rule(inline, "GG103") == []
    renamed = WHOLE_RUN.replace("accum", "k").replace("micro_step", "t").replace("total_micro_steps", "n")
    assert _rule(renamed, "GG103") == []


def test_gg103_twin_a_run_length_not_a_multiple_is_reported():
    for count in ("epochs * 7", "epochs * 6 + 1", "epochs"):
        bad = WHOLE_RUN.replace("epochs * 6", count)
        assert bad != WHOLE_RUN and _rule(bad, "GG103") == ["GG103"], count
    assert _left_in_grad(WHOLE_RUN.replace("epochs * 6", "epochs * 7"), 1)


def _as_method(source):
    """The same loop as a method of a class holding the optimizer (``self.opt``), called by ``train``."""
    body = source.split("\n", 1)[1]
    indented = "".join("    " + line if line.strip() else line for line in body.splitlines(True))
    indented = indented.replace("optimizer.", "self.opt.")
    head = source.split("\n", 1)[0]
    params = head[head.index("(") + 1:head.index(")")].split(", ")
    rest = [p for p in params if p != "optimizer"]
    imports = "import torch\n\n\n" if "torch." in source else ""
    return (imports + "class Runner:\n    def __init__(self, optimizer):\n        self.opt = optimizer\n\n"
            f"    def run(self, {', '.join(rest)}):\n" + indented +
            f"\n\ndef train({', '.join(params)}):\n    Runner(optimizer).run({', '.join(rest)})\n")


def test_method_forms_keep_the_verdicts():
    counted = COUNTED_FIRST.replace("import torch\n\n\n", "")
    method = _as_method(counted)
    assert "self.opt.step()" in method and _rule(method, "GG105") == []
    assert torch.allclose(_run_groups(method), _reference_groups(), atol=1e-10)
    whole = _as_method(WHOLE_RUN)
    assert "self.opt.step()" in whole and _rule(whole, "GG103") == []
    assert not _left_in_grad(whole, 2)
    assert _rule(_as_method(WHOLE_RUN.replace("epochs * 6", "epochs * 7")), "GG103") == ["GG103"]


WHILE_BOUND = """\
def train(model, optimizer, loader, unused):
    total, accum = 12, 3
    step = 0
    while step < total:
        for x, y in loader:
            if step >= total:
                break
            loss = ((model(x) - y) ** 2).mean() / accum
            loss.backward()
            if (step + 1) % accum == 0:
                optimizer.step()
                optimizer.zero_grad()
            step += 1
"""


def test_gg103_a_while_bound_proved_a_multiple_of_the_window_is_not_reported():
    # 4 batches a pass, windows of 3 spanning passes, 12 micro-batches in all: the last one closes a window
    assert _rule(WHILE_BOUND, "GG103") == []
    assert not _left_in_grad(WHILE_BOUND, 0)
    renamed = WHILE_BOUND.replace("step", "n").replace("total", "limit").replace("accum", "k")
    assert _rule(renamed, "GG103") == []


def test_gg103_twin_a_while_bound_not_a_multiple_is_reported():
    for bad in (WHILE_BOUND.replace("total, accum = 12, 3", "total, accum = 13, 3"),
                WHILE_BOUND.replace("    step = 0\n", "    step = 1\n"),
                WHILE_BOUND.replace("            step += 1\n", "            step += 1\n            step += x.shape[0] > 9\n")):
        assert bad != WHILE_BOUND and _rule(bad, "GG103") == ["GG103"]
    assert _left_in_grad(WHILE_BOUND.replace("total, accum = 12, 3", "total, accum = 13, 3"), 0)


def test_gg102_twin_another_object_holding_the_trainer_changes_the_test_is_reported():
    bad = SAME_TEST.replace("class Trainer:\n", "class Helper:\n    def __init__(self, owner):\n        self.owner = owner\n\n"
                            "    def bump(self):\n        self.owner.accum_count = 1\n\n\nclass Trainer:\n").replace(
        "        self.accum_count = accum_count\n", "        self.accum_count = accum_count\n        self.helper = Helper(self)\n").replace(
        "            loss.backward()\n", "            loss.backward()\n            self.helper.bump()\n")
    assert bad != SAME_TEST and _rule(bad, "GG102") == ["GG102"]
    assert not torch.allclose(_run_trainer(bad, 3), _reference_trainer(3), atol=1e-3)
