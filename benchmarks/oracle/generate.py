"""Generated training programs for the execution oracle (issue 33, item 2).

A :class:`Spec` fixes what a training loop does — how and where it clears ``.grad``, when it
steps, how it scales the loss or the gradients, what it does with the last partial window,
how it logs the loss, how large its micro-batches are — each choice drawn independently.
:func:`render` writes one spec as a standalone Python file in one of several *forms* that
compute the same thing:

* ``module``   — a module-level loop, long names (``optimizer``, ``accumulation_steps``);
* ``module_short`` — the same loop with short names (``o``, ``m``, ``k``, ``l``);
* ``function`` — a ``train()`` function with helpers for the clearing, the loss and the update,
  short names (``o``, ``m``, ``k``);
* ``method``   — a ``Trainer`` class holding ``self.opt`` / ``self.model``, the loop in a method;
* ``closure``  — closures built by a factory and called as callbacks from the loop.

Every program runs in float64 on a few dozen random rows in milliseconds. The spec is *not*
the truth: :mod:`benchmarks.oracle.truth` runs the program and decides from the numbers.

>>> spec = sample(random.Random(0))
>>> src = render(spec, "method")
>>> compile(src, "<p>", "exec") is not None
True
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Tuple

IN, OUT = 6, 3  # the model: one Linear(6, 3) = 21 parameters, more than the micro-batches of a run

CLEAR_FORMS = (
    "zero_grad",  # optimizer.zero_grad()
    "zero_grad_none",  # optimizer.zero_grad(set_to_none=True)
    "zero_grad_keep",  # optimizer.zero_grad(set_to_none=False)
    "model_zero_grad",  # model.zero_grad()
    "grad_none",  # for p in ...: p.grad = None
    "grad_zero",  # for p in ...: if p.grad is not None: p.grad.zero_()
    "grad_fill",  # ... p.grad.fill_(0)
    "grad_data_zero",  # ... p.grad.data.zero_()
)
CLEAR_PLACES = (
    "after_step",  # right after the step (correct)
    "window_start",  # before the first micro-batch of each window (correct)
    "before_step",  # after the backward passes, just before the step (discards the window)
    "every_micro",  # before every forward (discards all but the last micro-batch when K > 1)
    "after_backward",  # right after every backward (discards everything)
    "missing",  # never (stale gradients)
)
CONDITIONS = ("plain", "mod_plus1", "mod_k_minus1", "counter", "inner")
DIVISIONS = ("none", "K", "len", "tokens", "counter", "grad_K", "grad_len", "K_and_grad_K")
REMAINDERS = ("in_condition", "after_loop", "drop")
BACKWARDS = ("method", "function")  # loss.backward() / torch.autograd.backward(loss)
LOGGING = ("none", "item", "item_weighted", "detach", "tensor")
FORMS = ("module", "module_short", "function", "method", "closure")


@dataclass(frozen=True)
class Spec:
    seed: int
    k: int
    sizes: Tuple[int, ...]
    condition: str
    clear_form: str
    clear_place: str
    division: str
    remainder: str
    logging: str
    backward: str = "method"

    def to_dict(self) -> dict:
        return asdict(self)


def sample(rng: random.Random) -> Spec:
    """One spec, each choice drawn independently (a few combinations are made consistent:
    a plain loop steps every micro-batch, so its K is 1 and it has no window to divide by)."""
    condition = rng.choice(CONDITIONS)
    k = 1 if condition == "plain" else rng.choice((2, 3, 4))
    windows = 3 if k > 1 else rng.choice((4, 5, 6))  # >= 3 steps: the watch's GG102 needs a repeated discard
    extra = rng.choice((0, 0, 1, k - 1)) if k > 1 else 0  # a partial last window, or none
    n_micro = windows * k + extra
    equal = rng.random() < 0.5
    size = rng.choice((2, 3))
    sizes = tuple(size if equal else rng.choice((1, 2, 3, 4)) for _ in range(n_micro))
    return Spec(
        seed=rng.randrange(1 << 30),
        k=k,
        sizes=sizes,
        condition=condition,
        clear_form=rng.choice(CLEAR_FORMS),
        clear_place=rng.choices(CLEAR_PLACES, weights=(3, 2, 1, 1, 1, 1))[0],
        division="none" if condition == "plain" else rng.choice(DIVISIONS),
        remainder="drop" if condition == "plain" else rng.choice(REMAINDERS),
        logging=rng.choice(LOGGING),
        backward=rng.choice(BACKWARDS),
    )


def specs(n: int, seed: int = 0) -> List[Spec]:
    rng = random.Random(seed)
    return [sample(rng) for _ in range(n)]


# ---------------------------------------------------------------------------------------------
# rendering: one loop body, written through a form's names and helpers

LONG = dict(model="model", opt="optimizer", k="accumulation_steps", batches="batches", i="step_index",
            j="micro_index", x="inputs", y="targets", loss="loss", total="running_loss", window="window",
            count="micro_count", start="window_start", p="param", per_item="per_example")
SHORT = dict(model="m", opt="o", k="k", batches="bs", i="t", j="u", x="xb", yb="yb", y="yb", loss="l",
             total="tot", window="w", count="c", start="s", p="q", per_item="e")


def _clear_lines(form: str, n: Dict[str, str]) -> List[str]:
    opt, model, p = n["opt"], n["model"], n["p"]
    if form == "zero_grad":
        return [f"{opt}.zero_grad()"]
    if form == "zero_grad_none":
        return [f"{opt}.zero_grad(set_to_none=True)"]
    if form == "zero_grad_keep":
        return [f"{opt}.zero_grad(set_to_none=False)"]
    if form == "model_zero_grad":
        return [f"{model}.zero_grad()"]
    if form == "grad_none":
        return [f"for {p} in {model}.parameters():", f"    {p}.grad = None"]
    op = {"grad_zero": ".zero_()", "grad_fill": ".fill_(0)", "grad_data_zero": ".data.zero_()"}[form]
    return [f"for {p} in {model}.parameters():", f"    if {p}.grad is not None:", f"        {p}.grad{op}"]


class _Writer:
    """Lines with indentation."""

    def __init__(self):
        self.lines: List[str] = []
        self.level = 0

    def add(self, *lines: str) -> None:
        for line in lines:
            self.lines.append("    " * self.level + line if line else "")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


class _Form:
    """How one form writes each operation of the loop (inline, or a call of its helper)."""

    def __init__(self, spec: Spec, names: Dict[str, str]):
        self.s, self.n = spec, names

    # the operations, as lines (overridden by forms that call helpers)
    def clear(self) -> List[str]:
        return _clear_lines(self.s.clear_form, self.n)

    def loss(self, divisor: str) -> List[str]:
        n = self.n
        reduce = "sum" if self.s.division == "tokens" else "mean"
        expr = f"{n['per_item']}.{reduce}()" + (f" / {divisor}" if divisor else "")
        return [f"{n['per_item']} = (({n['model']}({n['x']}) - {n['y']}) ** 2).sum(dim=1)", f"{n['loss']} = {expr}"]

    def backward(self) -> List[str]:
        if self.s.backward == "function":
            return [f"torch.autograd.backward({self.n['loss']})"]
        return [f"{self.n['loss']}.backward()"]

    def log(self) -> List[str]:
        n, how = self.n, self.s.logging
        if how == "none":
            return []
        value = {"item": f"{n['loss']}.item()", "item_weighted": f"{n['loss']}.item() * len({n['x']})",
                 "detach": f"{n['loss']}.detach()", "tensor": n["loss"]}[how]
        return [f"{n['total']} += {value}"]

    def update(self, divisor: str) -> List[str]:
        """The gradient scaling (if any) and the step."""
        n = self.n
        out = []
        if divisor:
            out += [f"for {n['p']} in {n['model']}.parameters():", f"    if {n['p']}.grad is not None:",
                    f"        {n['p']}.grad /= {divisor}"]
        return out + [f"{n['opt']}.step()"]


def _divisor(spec: Spec, n: Dict[str, str], micro: str) -> str:
    """The loss's divisor, written with the loop's names (``micro``: the 0-based micro-step)."""
    d = spec.division
    if d in ("K", "K_and_grad_K"):
        return n["k"]
    if d == "len":
        return f"len({n['window']})"
    if d == "tokens":
        return f"sum(len(a) for a, _ in {n['window']})"
    if d == "counter":
        return f"({micro} + 1)"
    return ""


def _grad_divisor(spec: Spec, n: Dict[str, str]) -> str:
    return {"grad_K": n["k"], "K_and_grad_K": n["k"], "grad_len": f"len({n['window']})"}.get(spec.division, "")


def _body(w: _Writer, f: _Form) -> None:
    """The training loop over ``batches`` (a list of (inputs, targets))."""
    s, n = f.s, f.n
    place = s.clear_place

    def step_block(divisor: str):
        if place == "before_step":
            w.add(*f.clear())
        w.add(*f.update(divisor))
        if place == "after_step":
            w.add(*f.clear())

    def micro(micro_index: str, divisor: str):
        if place == "every_micro":
            w.add(*f.clear())
        w.add(*f.loss(divisor))
        w.add(*f.backward())
        if place == "after_backward":
            w.add(*f.clear())
        w.add(*f.log())

    if s.condition == "plain":
        w.add(f"for {n['x']}, {n['y']} in {n['batches']}:")
        w.level += 1
        if place == "window_start":
            w.add(*f.clear())
        micro("0", "")
        step_block("")
        w.level -= 1
        return

    if s.condition == "inner":
        end = f"len({n['batches']})" if s.remainder != "drop" else f"len({n['batches']}) - {n['k']} + 1"
        w.add(f"for {n['start']} in range(0, {end}, {n['k']}):")
        w.level += 1
        w.add(f"{n['window']} = {n['batches']}[{n['start']}:{n['start']} + {n['k']}]")
        if place == "window_start":
            w.add(*f.clear())
        w.add(f"for {n['j']}, ({n['x']}, {n['y']}) in enumerate({n['window']}):")
        w.level += 1
        micro(n["j"], _divisor(s, n, n["j"]))
        w.level -= 1
        step_block(_grad_divisor(s, n))
        w.level -= 1
        return

    # one loop over micro-batches with a step condition
    i, k = n["i"], n["k"]
    if s.condition == "counter":
        w.add(f"{n['count']} = 0")
    w.add(f"for {i}, ({n['x']}, {n['y']}) in enumerate({n['batches']}):")
    w.level += 1
    needs_window = s.division in ("len", "tokens", "grad_len")
    if needs_window:
        w.add(f"{n['window']} = {n['batches']}[{i} - {i} % {k}:][:{k}]")
    if place == "window_start":
        first = f"{n['count']} == 0" if s.condition == "counter" else f"{i} % {k} == 0"
        w.add(f"if {first}:")
        w.level += 1
        w.add(*f.clear())
        w.level -= 1
    micro_index = n["count"] if s.condition == "counter" else f"{i} % {k}"
    micro(micro_index, _divisor(s, n, micro_index))
    if s.condition == "counter":
        w.add(f"{n['count']} += 1")
        cond = f"{n['count']} == {k}"
    elif s.condition == "mod_plus1":
        cond = f"({i} + 1) % {k} == 0"
    else:
        cond = f"{i} % {k} == {k} - 1"
    if s.remainder == "in_condition":
        cond += f" or {i} + 1 == len({n['batches']})"
    w.add(f"if {cond}:")
    w.level += 1
    step_block(_grad_divisor(s, n))
    if s.condition == "counter":
        w.add(f"{n['count']} = 0")
    w.level -= 1
    w.level -= 1
    if s.remainder == "after_loop":
        pending = f"{n['count']} > 0" if s.condition == "counter" else f"len({n['batches']}) % {k} != 0"
        w.add(f"if {pending}:")
        w.level += 1
        if needs_window:
            w.add(f"{n['window']} = {n['batches']}[len({n['batches']}) - len({n['batches']}) % {k}:]")
        step_block(_grad_divisor(s, n))
        w.level -= 1


def _data(w: _Writer, s: Spec, batches: str) -> None:
    w.add(f"_g = torch.Generator().manual_seed({s.seed})",
          f"SIZES = {list(s.sizes)}",
          f"_X = torch.randn(sum(SIZES), {IN}, generator=_g, dtype=torch.float64)",
          f"_Y = torch.randn(sum(SIZES), {OUT}, generator=_g, dtype=torch.float64)",
          f"_ends = [sum(SIZES[:n + 1]) for n in range(len(SIZES))]",
          f"{batches} = [(_X[e - z:e], _Y[e - z:e]) for e, z in zip(_ends, SIZES)]")


def data_tensors(spec: Spec):
    """The rows every rendering of ``spec`` trains on (what the harness matches inputs against)."""
    import torch

    g = torch.Generator().manual_seed(spec.seed)
    n = sum(spec.sizes)
    x = torch.randn(n, IN, generator=g, dtype=torch.float64)
    y = torch.randn(n, OUT, generator=g, dtype=torch.float64)
    return x, y


def _total_init(s: Spec) -> str:
    return "torch.zeros((), dtype=torch.float64)" if s.logging == "detach" else "0.0"


def _module(s: Spec, n: Dict[str, str] = LONG) -> str:
    w = _Writer()
    w.add("import torch", "")
    _data(w, s, n["batches"])
    w.add("", f"{n['model']} = torch.nn.Linear({IN}, {OUT}).double()",
          f"{n['opt']} = torch.optim.SGD({n['model']}.parameters(), lr=0.05)",
          f"{n['k']} = {s.k}", f"{n['total']} = {_total_init(s)}", "")
    _body(w, _Form(s, n))
    w.add(f"print(float({n['total']}))")
    return w.text()


class _HelperForm(_Form):
    """The function form: the clearing, the loss and the update are helpers."""

    def clear(self):
        return [f"clear_grads({self.n['opt']}, {self.n['model']})"]

    def loss(self, divisor):
        n = self.n
        args = f"{n['model']}, {n['x']}, {n['y']}" + (f", {divisor}" if divisor else "")
        return [f"{n['loss']} = compute_loss({args})"]

    def update(self, divisor):
        n = self.n
        return [f"apply_update({n['opt']}, {n['model']}" + (f", {divisor})" if divisor else ")")]


def _function(s: Spec) -> str:
    n = SHORT
    w = _Writer()
    w.add("import torch", "", "")
    w.add(f"def clear_grads({n['opt']}, {n['model']}):")
    w.level += 1
    w.add(*_clear_lines(s.clear_form, n))
    w.level -= 1
    w.add("", "")
    reduce = "sum" if s.division == "tokens" else "mean"
    w.add(f"def compute_loss({n['model']}, {n['x']}, {n['y']}, d=1):",
          f"    {n['per_item']} = (({n['model']}({n['x']}) - {n['y']}) ** 2).sum(dim=1)",
          f"    return {n['per_item']}.{reduce}() / d" if s.division not in ("none", "grad_K", "grad_len")
          else f"    return {n['per_item']}.{reduce}()",
          "", "")
    w.add(f"def apply_update({n['opt']}, {n['model']}, d=None):",
          "    if d is not None:",
          f"        for {n['p']} in {n['model']}.parameters():",
          f"            if {n['p']}.grad is not None:",
          f"                {n['p']}.grad /= d",
          f"    {n['opt']}.step()", "", "")
    w.add(f"def train({n['model']}, {n['opt']}, {n['batches']}, {n['k']}):")
    w.level += 1
    w.add(f"{n['total']} = {_total_init(s)}")
    _body(w, _HelperForm(s, n))
    w.add(f"return {n['total']}")
    w.level -= 1
    w.add("", "", "def main():")
    w.level += 1
    _data(w, s, "data")
    w.add(f"net = torch.nn.Linear({IN}, {OUT}).double()",
          "print(float(train(net, torch.optim.SGD(net.parameters(), lr=0.05), data, " f"{s.k})))")
    w.level -= 1
    w.add("", "", 'if __name__ == "__main__":', "    main()")
    return w.text()


class _MethodForm(_Form):
    def clear(self):
        return ["self.clear()"]

    def update(self, divisor):
        return [f"self.update({divisor})"]

    def loss(self, divisor):
        n = self.n
        return [f"{n['loss']} = self.loss_of({n['x']}, {n['y']}" + (f", {divisor})" if divisor else ")")]


def _method(s: Spec) -> str:
    n = dict(LONG, model="self.model", opt="self.opt", k="self.accumulation_steps", total="self.total")
    w = _Writer()
    w.add("import torch", "", "")
    w.add("class Trainer:")
    w.level += 1
    w.add("def __init__(self, model, accumulation_steps):",
          "    self.model = model",
          "    self.opt = torch.optim.SGD(model.parameters(), lr=0.05)",
          "    self.accumulation_steps = accumulation_steps",
          f"    self.total = {_total_init(s)}", "")
    w.add("def clear(self):")
    w.level += 1
    w.add(*_clear_lines(s.clear_form, n))
    w.level -= 1
    w.add("")
    reduce = "sum" if s.division == "tokens" else "mean"
    w.add("def loss_of(self, inputs, targets, divisor=1):",
          "    per_example = ((self.model(inputs) - targets) ** 2).sum(dim=1)",
          f"    return per_example.{reduce}() / divisor", "")
    w.add("def update(self, divisor=None):",
          "    if divisor is not None:",
          "        for param in self.model.parameters():",
          "            if param.grad is not None:",
          "                param.grad /= divisor",
          "    self.opt.step()", "")
    w.add("def fit(self, batches):")
    w.level += 1
    _body(w, _MethodForm(s, n))
    w.add("return self.total")
    w.level -= 2
    w.add("", "")
    _data(w, s, "batches")
    w.add("", 'if __name__ == "__main__":',
          f"    trainer = Trainer(torch.nn.Linear({IN}, {OUT}).double(), {s.k})",
          "    print(float(trainer.fit(batches)))")
    return w.text()


class _ClosureForm(_Form):
    """Callbacks built by a factory: the backward pass and the update are closures."""

    def loss(self, divisor):
        n = self.n
        return [f"{n['loss']} = forward({n['x']}, {n['y']}" + (f", {divisor})" if divisor else ")")]

    def update(self, divisor):
        return [f"on_window_end({divisor})"]

    def clear(self):
        return ["reset()"]


def _closure(s: Spec) -> str:
    n = dict(SHORT, total="log['total']")
    w = _Writer()
    w.add("import torch", "", "")
    w.add(f"def make_callbacks({n['model']}, {n['opt']}):")
    w.level += 1
    w.add("def reset():")
    w.level += 1
    w.add(*_clear_lines(s.clear_form, n))
    w.level -= 1
    reduce = "sum" if s.division == "tokens" else "mean"
    w.add("", f"def forward({n['x']}, {n['y']}, d=1):",
          f"    return (({n['model']}({n['x']}) - {n['y']}) ** 2).sum(dim=1).{reduce}() / d", "",
          "def on_window_end(d=None):",
          "    if d is not None:",
          f"        for {n['p']} in {n['model']}.parameters():",
          f"            if {n['p']}.grad is not None:",
          f"                {n['p']}.grad /= d",
          f"    {n['opt']}.step()", "",
          "return reset, forward, on_window_end")
    w.level -= 1
    w.add("", "", f"def run({n['model']}, {n['batches']}, {n['k']}):")
    w.level += 1
    w.add(f"{n['opt']} = torch.optim.SGD({n['model']}.parameters(), lr=0.05)",
          f"reset, forward, on_window_end = make_callbacks({n['model']}, {n['opt']})",
          f"log = {{'total': {_total_init(s)}}}")
    _body(w, _ClosureForm(s, n))
    w.add("return log['total']")
    w.level -= 1
    w.add("", "")
    _data(w, s, "DATA")
    w.add("", 'if __name__ == "__main__":',
          f"    print(float(run(torch.nn.Linear({IN}, {OUT}).double(), DATA, {s.k})))")
    return w.text()


_RENDER = {"module": _module, "module_short": lambda s: _module(s, SHORT), "function": _function, "method": _method, "closure": _closure}


def render(spec: Spec, form: str = "module") -> str:
    """The program of ``spec`` written in ``form`` (one of :data:`FORMS`)."""
    return _RENDER[form](spec)
