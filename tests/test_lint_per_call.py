"""A function that is one update, called by a loop the file does not show.

``def train_step(self, batch): ...; loss.backward(); self.opt.step()`` whose loop is a framework's
``fit()`` in another file, a step function returned by a factory, a function handed the optimizer:
it steps an optimizer it does not build, so it is called again and again, and what one call
leaves in ``.grad`` is there at the next. The linter reads its body as one iteration of a loop
(GG101: nothing clears; GG102: a clearing between the backward pass and the step, on every
micro-batch of a window the function closes, inside its micro-step loop).

Every case is written in several forms that compute the same thing (a method holding the
optimizer, a function handed it, a closure a factory returns, the backward pass in a helper,
unrelated code beside it), with three sets of names and each way of clearing; the verdict must
not change. The silent twins are the shapes where the file shows that the update is correct or
that a caller clears. The bad programs are run in float64: called three times, they do not train
like the correct program, and their fix does.
"""

from __future__ import annotations

import itertools
import textwrap
from pathlib import Path

import pytest
import torch

from gradguard.lint import lint_source
from gradguard.lint.autofix import fix_source

NAMES = [
    dict(model="model", opt="optimizer", x="batch", loss="loss", fn="train_step", grad="p"),
    dict(model="m", opt="o", x="b", loss="l", fn="f", grad="w"),
    dict(model="policy", opt="solver", x="sample", loss="objective", fn="update_agent", grad="tensor"),
]

#: ways to clear every gradient the optimizer reads (``{M}``/``{O}``: the model and optimizer as the body writes them)
CLEARS = {
    "zero_grad": "{O}.zero_grad()",
    "set_to_none": "{O}.zero_grad(set_to_none=True)",
    "model_zero_grad": "{M}.zero_grad()",
    "grad_none": "for {grad} in {M}.parameters():\n    {grad}.grad = None",
    "helper": "wipe({M})",
}
#: the clearings a between-backward-and-step check knows wipe everything (a loop over `.grad`
#: may leave some parameters: dropping a frozen one's gradient is legitimate)
FULL = ("zero_grad", "set_to_none", "model_zero_grad")

_HELPER = "def wipe(module):\n    for q in module.parameters():\n        q.grad = None\n"

#: one update: ``{CLEAR_START}`` / ``{CLEAR_MID}`` / ``{CLEAR_END}`` are where a clearing may go
PLAIN = """\
{CLEAR_START}
{loss} = {M}({x}).pow(2).mean()
{BACKWARD}
{CLEAR_MID}
{O}.step()
{CLEAR_END}
return {loss}.item()
"""

#: one micro-batch of a window the function closes (a counter its owner keeps)
WINDOW = """\
last = {COUNT} % 4 == 0
{CLEAR_START}
{loss} = {M}({x}).pow(2).mean() / 4
{BACKWARD}
{CLEAR_MID}
if last:
    {O}.step()
    {CLEAR_END}
return {loss}.item()
"""

#: a whole window in one call: the batch in four micro-batches
MICRO = """\
for piece in {x}.chunk(4):
    {loss} = {M}(piece).pow(2).mean() / 4
    {BACKWARD}
    {CLEAR_MID}
{O}.step()
{CLEAR_END}
"""

FORMS = ("method", "function", "closure", "helper", "unrelated")


def render(body: str, names: dict, form: str, clear: str, where: str) -> str:
    """``body`` as one update in ``form``, with ``clear`` at ``where`` (start / mid / end / none)."""
    method = form in ("method", "helper")
    M = "self." + names["model"] if method else names["model"]
    O = "self." + names["opt"] if method else names["opt"]
    count = "self.calls" if method else "counter[0]"
    backward = "self.backprop({loss})" if form == "helper" else "{loss}.backward()"
    lines = []
    for line in textwrap.dedent(body).split("\n"):
        pad = line[: len(line) - len(line.lstrip())]
        slot = {"{CLEAR_START}": "start", "{CLEAR_MID}": "mid", "{CLEAR_END}": "end"}.get(line.strip())
        if slot is not None:
            if slot == where:
                lines += [pad + s for s in clear.split("\n")]
            continue
        lines.append(line.replace("{BACKWARD}", backward).replace("{COUNT}", count))
    code = "\n".join(lines).replace("{M}", M).replace("{O}", O).replace("{grad}", names["grad"])
    if form in ("method", "helper"):
        head = (
            "class Learner:\n"
            "    def __init__(self, {model}, make_opt):\n"
            "        self.{model} = {model}\n"
            "        self.{opt} = make_opt({model}.parameters())\n"
            "        self.calls = 0\n\n"
        )
        if form == "helper":
            head += "    def backprop(self, value):\n        value.backward()\n\n"
        src = head + "    def {fn}(self, {x}):\n" + textwrap.indent(code, " " * 8)
    elif form == "closure":
        src = ("def make_{fn}({model}, {opt}, counter):\n    def {fn}({x}):\n" + textwrap.indent(code, " " * 8)
               + "\n    return {fn}")
    else:
        src = "def {fn}({model}, {opt}, {x}, counter):\n" + textwrap.indent(code, " " * 4)
    prelude = "import torch\n\n\n" + (_HELPER + "\n\n" if "wipe(" in src else "")
    if form == "unrelated":
        prelude += (
            "import logging\n\nlog = logging.getLogger(__name__)\nper_item = torch.nn.MSELoss(reduction=\"none\")\n\n\n"
            "def evaluate(net, data):\n    with torch.no_grad():\n        return sum(per_item(net(v), v).sum().item() for v in data)\n\n\n"
        )
    out = prelude + src + "\n"
    for key, value in names.items():
        out = out.replace("{" + key + "}", value)
    return out


def _found(source: str) -> tuple:
    return tuple(sorted({f.code for f in lint_source(source, "prog.py") if f.code in ("GG101", "GG102")}))


# (body, where the clearing goes, the clearings, the verdict)
CASES = {
    "cleared_at_start": (PLAIN, "start", tuple(CLEARS), ()),
    "cleared_after_step": (PLAIN, "end", tuple(CLEARS), ()),
    "never_cleared": (PLAIN, "none", ("zero_grad",), ("GG101",)),
    "cleared_between_backward_and_step": (PLAIN, "mid", FULL, ("GG102",)),
    "window_cleared_after_its_step": (WINDOW, "end", tuple(CLEARS), ()),
    "window_cleared_before_every_backward": (WINDOW, "start", FULL, ("GG102",)),
    "window_cleared_after_every_backward": (WINDOW, "mid", FULL, ("GG102",)),
    "micro_steps_cleared_after_the_step": (MICRO, "end", tuple(CLEARS), ()),
    "micro_steps_cleared_on_every_micro_batch": (MICRO, "mid", FULL, ("GG102",)),
}


def _params():
    for name, (body, where, clears, expect) in CASES.items():
        for clear in clears:
            yield pytest.param(body, where, clear, expect, id=f"{name}-{clear}")


@pytest.mark.parametrize("body, where, clear, expect", list(_params()))
def test_one_update_per_call_verdict_in_every_form(body, where, clear, expect):
    wrong = []
    for names, form in itertools.product(NAMES, FORMS):
        source = render(body, names, form, CLEARS[clear], where)
        compile(source, "prog.py", "exec")
        got = _found(source)
        if got != expect:
            wrong.append(f"--- {form}, names {names['opt']}: got {got}, want {expect}\n{source}")
    assert not wrong, "\n".join(wrong[:2]) + f"\n({len(wrong)} of {len(NAMES) * len(FORMS)} forms wrong)"


# --- what the file shows about the callers and the optimizer --------------------------------
CALLER_CLEARS = """\
import torch


def {fn}({model}, {opt}, {x}):
    {loss} = {model}({x}).pow(2).mean()
    {loss}.backward()
    {opt}.step()


def run({model}, {opt}, data):
    for {x} in data:
        {opt}.zero_grad()
        {fn}({model}, {opt}, {x})
"""

CALLER_CLEARS_FACTORY = """\
import torch


def make_{fn}({model}, {opt}):
    def {fn}({x}):
        {model}({x}).pow(2).mean().backward()
        {opt}.step()
    return {fn}


{model} = torch.nn.Linear(3, 1)
{opt} = torch.optim.SGD({model}.parameters(), lr=0.1)
one = make_{fn}({model}, {opt})
for {x} in [torch.ones(2, 3)] * 3:
    {opt}.zero_grad()
    one({x})
"""

CALLER_CLEARS_TWO_LEVELS = """\
import torch


class Learner:
    def __init__(self, {model}, make_opt):
        self.{model} = {model}
        self.{opt} = make_opt({model}.parameters())

    def {fn}(self, {x}):
        self.{model}({x}).pow(2).mean().backward()
        self.{opt}.step()

    def _one(self, {x}):
        self.{fn}({x})

    def fit(self, data):
        for {x} in data:
            self.{opt}.zero_grad(set_to_none=True)
            self._one({x})
"""

NEVER_STEPS = """\
import torch


class Learner:
    def __init__(self, {model}, make_opt):
        self.{model} = {model}
        self.{opt} = make_opt({model}.parameters())

    def {fn}(self, {x}):
        {loss} = self.{model}({x}).pow(2).mean()
        {loss}.backward()
        return {loss}.item()
"""

BUILDS_ITS_OPTIMIZER = """\
import torch


def {fn}(data):
    {model} = torch.nn.Linear(3, 1)
    {opt} = torch.optim.SGD({model}.parameters(), lr=0.1)
    {model}(data).pow(2).mean().backward()
    {opt}.step()
    return {model}
"""

OWN_LOOP = """\
import torch


def {fn}({model}, {opt}, data):
    for {x} in data:
        {opt}.zero_grad()
        {model}({x}).pow(2).mean().backward()
        {opt}.step()
"""

TRAINER_BACKWARD = """\
import torch


class Trainer:
    def __init__(self, {model}, {opt}):
        self.{model}, self.{opt} = {model}, {opt}

    def backward(self, value):
        value.backward()

    def {fn}(self, {x}):
        {CLEAR}
        {loss} = self.{model}({x}).pow(2).mean()
        self.backward({loss})
        self.{opt}.step()
"""


def _fill(template: str, names: dict, **extra) -> str:
    out = template
    for key, value in {**names, **extra}.items():
        out = out.replace("{" + key + "}", value)
    return out


@pytest.mark.parametrize("template", [CALLER_CLEARS, CALLER_CLEARS_FACTORY, CALLER_CLEARS_TWO_LEVELS, NEVER_STEPS,
                                      BUILDS_ITS_OPTIMIZER, OWN_LOOP],
                         ids=["caller_clears", "caller_of_factory_clears", "caller_two_levels_up_clears", "never_steps",
                              "builds_its_optimizer", "own_loop"])
def test_silent_where_the_file_shows_the_update_is_whole(template):
    for names in NAMES:
        source = _fill(template, names)
        assert _found(source) == (), source


@pytest.mark.parametrize("template", [CALLER_CLEARS, CALLER_CLEARS_FACTORY, CALLER_CLEARS_TWO_LEVELS])
def test_negative_control_the_caller_without_its_clearing(template):
    """The same files with the caller's clearing deleted: the update is found again."""
    for names in NAMES:
        source = "\n".join(line for line in _fill(template, names).split("\n") if "zero_grad" not in line)
        assert _found(source) == ("GG101",), source


def test_own_loop_is_checked_as_a_loop_once():
    """A function with its own training loop is no per-call update: its loop's finding, once."""
    for names in NAMES:
        source = "\n".join(line for line in _fill(OWN_LOOP, names).split("\n") if "zero_grad" not in line)
        assert [f.code for f in lint_source(source)] == ["GG101"], source


@pytest.mark.parametrize("clear, expect", [("{model}.zero_grad()", ()), ("pass", ("GG101",))])
def test_backward_as_a_method_of_the_trainer(clear, expect):
    for names in NAMES:
        source = _fill(TRAINER_BACKWARD, names, CLEAR=_fill(clear, {"model": "self." + names["model"]}))
        assert _found(source) == expect, source


def test_a_caller_in_another_linted_file_that_clears(tmp_path):
    """Linted with the file that calls it and clears (the files linted together): silent; the same
    file alone, or with a caller that does not clear (negative control): found."""
    from gradguard.lint import lint_paths

    lib = _fill(CALLER_CLEARS.split("\n\n\ndef run")[0] + "\n", NAMES[0])
    script = ("from lib import train_step\n\n\ndef run(model, optimizer, data):\n    for batch in data:\n"
              "        optimizer.zero_grad()\n        train_step(model, optimizer, batch)\n")
    (tmp_path / "lib.py").write_text(lib)
    assert [f.code for f in lint_paths([tmp_path / "lib.py"])] == ["GG101"]
    (tmp_path / "run.py").write_text(script)
    assert [f.code for f in lint_paths([tmp_path])] == []
    (tmp_path / "run.py").write_text(script.replace("        optimizer.zero_grad()\n", ""))
    # found in the helper (one update per call, nothing clears) and, since the caller's loop reads the
    # helper it imports as its own, at that loop (backward and step run, nothing clears)
    assert sorted((Path(f.path).name, f.code) for f in lint_paths([tmp_path])) == [("lib.py", "GG101"), ("run.py", "GG101")]


# --- run in float64: the bad update does not train like the correct one; its fix does -----------
def _train(source: str, form: str, calls: int = 3) -> list:
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1).double()
    data = [torch.randn(8, 3, dtype=torch.float64) for _ in range(calls)]
    namespace = {"__name__": "per_call_program"}
    exec(compile(source, "prog.py", "exec"), namespace)

    def make_opt(params):
        return torch.optim.SGD(params, lr=0.1)

    if form in ("method", "helper"):
        learner = namespace["Learner"](model, make_opt)
        for x in data:
            learner.calls += 1
            getattr(learner, NAMES[0]["fn"])(x)
    elif form == "closure":
        counter = [0]
        step = namespace["make_" + NAMES[0]["fn"]](model, make_opt(model.parameters()), counter)
        for x in data:
            counter[0] += 1
            step(x)
    else:
        opt, counter = make_opt(model.parameters()), [0]
        for x in data:
            counter[0] += 1
            namespace[NAMES[0]["fn"]](model, opt, x, counter)
    return [p.detach().clone() for p in model.parameters()]


def _same(a: list, b: list, tol: float) -> bool:
    return all(torch.allclose(x, y, rtol=0, atol=tol) for x, y in zip(a, b))


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("body, bad_where, good_where", [(PLAIN, "none", "start"), (PLAIN, "mid", "end"),
                                                         (WINDOW, "start", "end"), (MICRO, "mid", "end")],
                         ids=["never_cleared", "cleared_between", "window_cleared_each_pass", "micro_cleared_each_pass"])
def test_bad_update_trains_differently_and_its_fix_like_the_correct_one(form, body, bad_where, good_where):
    names = NAMES[0]
    bad = render(body, names, form, CLEARS["zero_grad"], bad_where)
    good = render(body, names, form, CLEARS["zero_grad"], good_where)
    reference = _train(good, form, calls=8)
    assert not _same(_train(bad, form, calls=8), reference, 1e-6)  # the finding is a real bug
    fixed = fix_source(bad, "prog.py")
    assert _found(fixed.text) == (), fixed.text
    assert _same(_train(fixed.text, form, calls=8), reference, 1e-12), fixed.text


# --- who computes the loss; a base class of another package; a method bound under another name ---
HANDED_LOSS = """\
import torch


class LossScaler:
    def __init__(self):
        self._scaler = torch.amp.GradScaler()

    def __call__(self, {loss}, {opt}, update_grad=True):
        self._scaler.scale({loss}).backward()
        if update_grad:
            self._scaler.step({opt})
            self._scaler.update()


class Agent:
    def __init__(self, {model}, {opt}):
        self.{model}, self.{opt} = {model}, {opt}

    def optimize(self, {loss}):
        ({loss} / 2).backward()
        self.{opt}.step()

    def {fn}(self, {x}):
        {CLEAR}
        self.optimize(self.{model}({x}).pow(2).mean())
"""


@pytest.mark.parametrize("clear, expect", [("self.{opt}.zero_grad()", ()), ("pass", ("GG101",))])
def test_a_helper_handed_the_loss_serves_its_callers_update(clear, expect):
    """``scaler(loss, opt)`` and ``optimize(loss)`` back-propagate a loss their caller computed: the update
    (and its clearing) is the caller's. The method computing the loss is the update: found there alone."""
    for names in NAMES:
        source = _fill(HANDED_LOSS, names, CLEAR=_fill(clear, names))
        found = [(f.code, f.line) for f in lint_source(source) if f.code in ("GG101", "GG102")]
        step_line = source.split("\n").index(_fill("        self.{opt}.step()", names)) + 1
        assert found == ([("GG101", step_line)] if expect else []), source


FOREIGN_BASE = """\
import torch
from {package} import {base}


class Learner({base}):
    def __init__(self, {model}, optimizer_class):
        super().__init__()
        self.{model} = {model}
        self.{opt} = optimizer_class(self.{model}.parameters(), lr=0.1)

    def {fn}(self, {x}):
        {loss} = self.{model}({x}).pow(2).mean()
        {loss}.backward()
        self.{opt}.step()
"""


@pytest.mark.parametrize("package, base, expect", [
    ("rl_library.core", "TorchTrainer", ("GG101",)),  # a base of a package nothing resolves to a framework
    ("some_project.base", "BaseAlgo", ("GG101",)),
    ("transformers", "Trainer", ()),  # the HF Trainer clears around its own training_step loop
    ("pytorch_lightning", "LightningModule", ()),  # Lightning runs the loop (automatic optimization)
])
def test_update_method_of_a_class_whose_base_lives_elsewhere(package, base, expect):
    for names in NAMES:
        assert _found(_fill(FOREIGN_BASE, names, package=package, base=base)) == expect


ALIASED = """\
import torch


class Impl:
    def __init__(self, {model}, {opt}, compiled):
        self.{model}, self.{opt} = {model}, {opt}
        self._grad_fn = torch.compile(self.compute_grad) if compiled else self.compute_grad

    def compute_grad(self, {x}):
        {CLEAR}
        {loss} = self.{model}({x}).pow(2).mean()
        {loss}.backward()
        return {loss}

    def {fn}(self, {x}):
        {loss} = self._grad_fn({x})
        self.{opt}.step()
        return float({loss})
"""


@pytest.mark.parametrize("clear, expect", [("self.{opt}.zero_grad()", ()), ("pass", ("GG101",))])
def test_a_method_called_under_the_name_it_is_bound_to(clear, expect):
    """``self._grad_fn = wrap(self.compute_grad) if compiled else self.compute_grad``: the update method
    calls ``self._grad_fn(x)``, which back-propagates (and clears, or not) in ``compute_grad``."""
    for names in NAMES:
        assert _found(_fill(ALIASED, names, CLEAR=_fill(clear, names))) == expect


# --- a clearing between two backward passes of one update (GG102) --------------------------------
TWO_PASSES = """\
import torch
import torch.nn.functional as F


def {fn}({model}, {opt}, data):
    for {x}, target in data:
        first = F.mse_loss({model}({x}), target)
        first.backward()
        {BETWEEN}
        {opt}.zero_grad()
        F.mse_loss({model}({x} * 2), target).backward()
        {opt}.step()
        {opt}.zero_grad()
"""


@pytest.mark.parametrize("between, expect", [
    ("pass", ("GG102",)),
    # the earlier pass's gradient is read first (an adversarial perturbation, a logged norm): it was used
    ("norm = sum(q.grad.norm() for q in {model}.parameters())", ()),
])
def test_clearing_between_two_backward_passes_of_one_update(between, expect):
    for names in NAMES:
        source = _fill(TWO_PASSES, names, BETWEEN=_fill(between, names))
        assert _found(source) == expect, source
        # the same update as a method holding the optimizer, its loop elsewhere
        method = source.replace(f"def {names['fn']}({names['model']}, {names['opt']}, data):\n    for {names['x']}, target in data:\n",
                                f"class L:\n    def {names['fn']}(self, {names['x']}, target):\n")
        method = method.replace(f"{names['model']}(", f"self.{names['model']}(").replace(
            f"{names['opt']}.", f"self.{names['opt']}.").replace(f"in {names['model']}.parameters", f"in self.{names['model']}.parameters")
        assert _found(method) == expect, method


def test_the_earlier_pass_wiped_is_a_real_loss_of_gradient():
    """Run in float64: with the clearing between the passes, the step applies the second pass only."""
    torch.manual_seed(0)
    x, t = torch.randn(8, 3, dtype=torch.float64), torch.randn(8, 1, dtype=torch.float64)
    source = _fill(TWO_PASSES, NAMES[0], BETWEEN="pass")
    both = "\n".join(line for line in source.split("\n") if line.strip() != "optimizer.zero_grad()" or "step" in line)
    results = []
    for program in (source, both.replace("        optimizer.step()\n", "        optimizer.step()\n        optimizer.zero_grad()\n")):
        ns = {}
        exec(compile(program, "prog.py", "exec"), ns)
        model = torch.nn.Linear(3, 1).double()
        torch.nn.init.ones_(model.weight)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        ns[NAMES[0]["fn"]](model, opt, [(x, t)])
        results.append(model.weight.detach().clone())
    assert not torch.allclose(results[0], results[1], atol=1e-6)
