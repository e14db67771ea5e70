"""GG105 from micro-batch sizes the file spells out: a window of micro-batches of different sizes,
each back-propagating its own mean, weighs the items of a small micro-batch more.

Each program below is linted and run in float64. A bad program trains away from the reference
(each step: the mean over the window's items, the full-batch gradient of the window), and is
reported; its twin that sums per-item losses over the window's items trains to the reference
and is silent. Negative controls: the same loop on equal sizes, and on sizes that differ only
between windows (each window is then a plain mean) are silent. Each case is written in several
forms (module loop, function with the data handed in, method, window slices, a counter, two
spellings of the data), with renamed identifiers: the verdict may not change.
"""

from __future__ import annotations

import textwrap

import pytest
import torch

from gradguard.lint import lint_source

K = 2
MIXED = [1, 3, 2, 2, 4, 1]  # windows (1, 3), (2, 2), (4, 1): two mix sizes
ACROSS = [1, 1, 3, 3, 2, 2]  # sizes differ, but never inside a window
EQUAL = [2] * 6

PRELUDE = """
import torch
torch.manual_seed(0)
X = torch.randn({total}, 4, dtype=torch.float64)
Y = torch.randn({total}, 2, dtype=torch.float64)
{S} = {sizes}
"""

DATA = {
    # slices whose extent is the size: x[e - n:e] for (end, size) pairs
    "slices": "{ends} = [sum({S}[:n + 1]) for n in range(len({S}))]\n{data} = [(X[e - z:e], Y[e - z:e]) for e, z in zip({ends}, {S})]",
    # torch.split with a list of sizes
    "split": "{data} = list(zip(torch.split(X, {S}), torch.split(Y, {S})))",
}

#: the loss of one micro-batch: its own mean (bad when sizes mix), or its per-item sum over the window's items
LOSS = {
    "mean": "(({model}({x}) - {y}) ** 2).sum(dim=1).mean() / {K}",
    "items": "(({model}({x}) - {y}) ** 2).sum(dim=1).sum() / sum(len(a) for a, _ in {window})",
}

LOOPS = {
    "module": """
{model} = torch.nn.Linear(4, 2).double()
{opt} = torch.optim.SGD({model}.parameters(), lr=0.1)
{K} = 2
for {i}, ({x}, {y}) in enumerate({data}):
    {window} = {data}[{i} - {i} % {K}:][:{K}]
    {loss} = {LOSS}
    {loss}.backward()
    if ({i} + 1) % {K} == 0:
        {opt}.step()
        {opt}.zero_grad()
""",
    "function": """
def compute({model}, {x}, {y}, {window}, {K}):
    return {LOSS}


def train({model}, {opt}, {data}, {K}):
    {c} = 0
    for {i}, ({x}, {y}) in enumerate({data}):
        {window} = {data}[{i} - {i} % {K}:][:{K}]
        {loss} = compute({model}, {x}, {y}, {window}, {K})
        {loss}.backward()
        {c} += 1
        if {c} == {K}:
            {opt}.step()
            {opt}.zero_grad()
            {c} = 0


{model} = torch.nn.Linear(4, 2).double()
train({model}, torch.optim.SGD({model}.parameters(), lr=0.1), {data}, 2)
""",
    "method": """
class Runner:
    def __init__(self, {model}, {K}):
        self.{model} = {model}
        self.{opt} = torch.optim.SGD({model}.parameters(), lr=0.1)
        self.{K} = {K}

    def fit(self, {data}):
        {K} = self.{K}
        {model} = self.{model}
        for {s} in range(0, len({data}), {K}):
            {window} = {data}[{s}:{s} + {K}]
            for {x}, {y} in {window}:
                {loss} = {LOSS}
                {loss}.backward()
            self.{opt}.step()
            self.{opt}.zero_grad()


{model} = torch.nn.Linear(4, 2).double()
Runner({model}, 2).fit({data})
""",
}

NAMES = [
    dict(S="SIZES", ends="ends", data="batches", model="model", opt="optimizer", K="accumulation_steps", i="step",
         x="inputs", y="targets", window="window", loss="loss", c="micro_count", s="start"),
    dict(S="q", ends="r", data="bb", model="m", opt="o", K="n", i="t", x="u", y="v", window="w", loss="l", c="cc", s="a"),
]


def program(loop: str, data: str, loss: str, sizes, names: dict) -> str:
    fill = dict(names, total=sum(sizes), sizes=list(sizes))
    fill["LOSS"] = LOSS[loss].format(**fill)
    text = PRELUDE.format(**fill) + DATA[data].format(**fill) + "\n" + textwrap.dedent(LOOPS[loop]).format(**fill)
    return text


def gg105(source: str) -> bool:
    return any(f.code == "GG105" for f in lint_source(source, "p.py"))


def trained(source: str) -> torch.Tensor:
    """The parameters the program trains to (its first Linear)."""
    made = []
    original = torch.nn.Linear.__init__

    def record(self, *a, **kw):
        original(self, *a, **kw)
        made.append(self)

    torch.nn.Linear.__init__ = record
    try:
        exec(compile(source, "p.py", "exec"), {"__name__": "__main__"})
    finally:
        torch.nn.Linear.__init__ = original
    return torch.cat([p.detach().flatten() for p in made[0].parameters()])


def reference(sizes) -> torch.Tensor:
    """Each step applies the mean gradient over the window's items (windows of K micro-batches)."""
    torch.manual_seed(0)
    x = torch.randn(sum(sizes), 4, dtype=torch.float64)
    y = torch.randn(sum(sizes), 2, dtype=torch.float64)
    model = torch.nn.Linear(4, 2).double()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    start = 0
    for w in range(0, len(sizes), K):
        n = sum(sizes[w:w + K])
        opt.zero_grad()
        ((model(x[start:start + n]) - y[start:start + n]) ** 2).sum(dim=1).mean().backward()
        opt.step()
        start += n
    return torch.cat([p.detach().flatten() for p in model.parameters()])


CASES = [(loop, data, n) for loop in LOOPS for data in DATA for n in range(len(NAMES))]


@pytest.mark.parametrize("loop,data,n", CASES)
def test_mixed_sizes_each_a_mean_are_reported_and_train_off_the_reference(loop, data, n):
    source = program(loop, data, "mean", MIXED, NAMES[n])
    assert not torch.allclose(trained(source), reference(MIXED), atol=1e-9)  # the defect is in the numbers
    assert gg105(source), source


@pytest.mark.parametrize("loop,data,n", CASES)
def test_the_twin_weighted_by_items_trains_to_the_reference_and_is_silent(loop, data, n):
    source = program(loop, data, "items", MIXED, NAMES[n])
    assert torch.allclose(trained(source), reference(MIXED), atol=1e-9)
    assert not gg105(source), source


@pytest.mark.parametrize("sizes", [EQUAL, ACROSS], ids=["equal", "across-windows"])
@pytest.mark.parametrize("loop,data,n", CASES)
def test_means_of_windows_with_equal_sizes_are_silent(loop, data, n, sizes):
    source = program(loop, data, "mean", sizes, NAMES[n])
    assert torch.allclose(trained(source), reference(sizes), atol=1e-9)  # a plain mean in every window
    assert not gg105(source), source


def test_sizes_the_file_does_not_spell_are_not_guessed():
    # the same loop over sizes read at run time: the linter cannot know them and says nothing
    source = program("module", "split", "mean", MIXED, NAMES[0]).replace("SIZES = [1, 3, 2, 2, 4, 1]",
                                                                          "SIZES = [int(v) for v in '132241']")
    assert torch.allclose(trained(source), trained(program("module", "split", "mean", MIXED, NAMES[0])))
    assert not gg105(source)


@pytest.mark.parametrize("var", ["i", "a"])
def test_a_name_bound_by_a_comprehension_in_the_divisor_is_no_counter(var):
    # `sum(len(i) for i, _ in window)` divides by the window's items whatever the comprehension's
    # variable is called, even the loop's own counter's name: the weights are equal (the reference)
    source = program("module", "split", "items", MIXED, NAMES[0]).replace("len(a) for a, _", f"len({var}) for {var}, _")
    source = source.replace("for step, (inputs", "for i, (inputs").replace("[step - step", "[i - i").replace("(step + 1)", "(i + 1)")
    assert f"len({var}) for {var}, _" in source and "(i + 1) % accumulation_steps" in source
    assert torch.allclose(trained(source), reference(MIXED), atol=1e-9)
    assert not gg105(source), source


def test_a_function_also_handed_on_as_a_value_has_callers_out_of_view():
    # `train` is also registered as a callback: whoever calls it from there hands in other data, so
    # the sizes of the one visible call prove nothing about every run (negative control: without
    # the registration the same file is reported)
    source = program("function", "split", "mean", MIXED, NAMES[0])
    assert gg105(source)
    assert not gg105(source + "\nCALLBACKS = {'train': train}\n")
