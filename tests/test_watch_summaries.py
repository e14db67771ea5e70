"""The tracker's column summaries: conservative at every event, and the findings they give are the columns'.

A correct loop keeps the watch's columns alike at every position (every buffer
cleared at the same pass, every parameter reached by the last one); the tracker
sums that up in a few values (``flat_since``, ``flat_last``, ``some_consumed``,
``some_zero``, ``bufs_none``) so that its events need no scan of the columns.
Every bad / good script pair runs here twice under ``gradguard run``: once with
the invariants between summaries and columns asserted after every tracker call,
once with the summaries forced to "not known" before every call and the other
shortcuts off (every zero_grad read back, a zero-fill in place seen buffer by
buffer). The findings must be the same.
"""

from pathlib import Path

import pytest

from gradguard.watcher import _hooks, _tracker

from _scripts import run_script as run_recorded

pytestmark = pytest.mark.filterwarnings("error:gradguard.watch stopped watching")

SCRIPTS = sorted((Path(__file__).parent / "watch_scripts").glob("*.py"))
ENTRY_POINTS = ("add", "subset", "opt_state", "sync", "arrived", "step_view", "applied", "let_go", "emptied",
                "unemptied", "forget", "moved_by_hand", "open_passes", "waiting", "live")


def broken_summaries(t: _tracker.Tracker) -> list:
    """What a column held as one value, or a column's one-value summary, claims that the column contradicts."""
    wrong = []
    n = len(t.params)
    for name, _ in _tracker.COLUMNS:
        flat, col = t.__dict__["flat_" + name], t.__dict__["_" + name]
        if col is None:
            if flat is _tracker.MIXED:
                wrong.append(f"{name}: neither a list nor one value")
            continue
        if len(col) != n:
            wrong.append(f"{name}: {len(col)} positions for {n} parameters")
        if flat is not _tracker.MIXED and not all(_tracker._same(v, flat) for v in col):
            wrong.append(f"{name}: one value {flat!r} claimed, column {col}")
    if t._all_owned is not None and t._all_owned != all(t.owned):
        wrong.append(f"_all_owned {t._all_owned}, owned {t.owned}")
    return wrong


def unknown(t: _tracker.Tracker) -> None:
    """Every column as a list, no summary: the events take the column scans."""
    for name, _ in _tracker.COLUMNS:
        getattr(t, name)
        t.__dict__["flat_" + name] = _tracker.MIXED
    t._all_owned = None


def per_position(monkeypatch) -> None:
    """The slow paths the columns replace: every zero_grad read back, a zero-fill in place seen buffer by buffer."""
    def zero_filled_one_by_one(self, sub, vers):  # (no pass's gradient waits: no clearing site to tell)
        grads = _tracker.grads_of(sub.get(self.params))
        for j, i in enumerate(sub.idx):
            self._observe(i, grads[j], None, True)

    monkeypatch.setattr(_hooks, "stock_zero_grad", lambda owner, module: False)
    monkeypatch.setattr(_tracker.Tracker, "_zero_filled_all", zero_filled_one_by_one)


def run_script(script: Path, tmp_path: Path, monkeypatch, before=None, after=None) -> list:
    if before is not None:
        per_position(monkeypatch)
    for name in ENTRY_POINTS:
        method = getattr(_tracker.Tracker, name)

        def wrapped(self, *args, _method=method, **kwargs):
            if before:
                before(self)
            result = _method(self, *args, **kwargs)
            if after:
                after(self)
            return result

        monkeypatch.setattr(_tracker.Tracker, name, wrapped)
    report = tmp_path / f"{script.stem}-{'checked' if after else 'unknown'}.json"
    monkeypatch.chdir(tmp_path)
    _, found = run_recorded(tmp_path, script, report=report.name)
    monkeypatch.undo()
    return [(d["code"], d["line"]) for d in found]


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS, ids=[s.stem for s in SCRIPTS])
def test_summaries_hold_and_find_what_the_columns_find(script, tmp_path, monkeypatch, capsys):
    wrong = []
    checked = run_script(script, tmp_path, monkeypatch, after=lambda t: wrong.extend(broken_summaries(t)))
    assert wrong == []
    plain = run_script(script, tmp_path, monkeypatch, before=unknown)
    assert checked == plain
    assert bool(checked) == script.stem.endswith("_bad")  # the run really watched: a bad script is found


@pytest.mark.slow
def test_the_check_catches_a_wrong_summary(tmp_path, monkeypatch, capsys):
    """Negative control: a write that forgets to mark its column mixed (the one value kept) is caught."""
    real = _tracker.Tracker._put

    def keeps_the_value(self, name, sub, values, value=_tracker.MIXED):
        flat = self.__dict__["flat_" + name]
        real(self, name, sub, values, value)
        if self.__dict__["_" + name] is not None:
            self.__dict__["flat_" + name] = flat

    caught = []
    for script in SCRIPTS:
        wrong = []
        monkeypatch.setattr(_tracker.Tracker, "_put", keeps_the_value)
        run_script(script, tmp_path, monkeypatch, after=lambda t: wrong.extend(broken_summaries(t)))
        if wrong:
            caught.append(script.stem)
    assert len(caught) >= 3, caught


@pytest.mark.parametrize("accumulate", [1, 3])
def test_a_correct_loop_is_summed_up(accumulate):
    """In a correct loop's steady state the summaries say it all (the events' scans are skipped); and a stale
    gradient (a forgotten zero_grad) is still found."""
    import torch
    import torch.nn.functional as F

    import gradguard as gg

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with gg.watch(mode="record") as w:
        t = w._engine.tracker
        for step in range(4):
            opt.zero_grad(set_to_none=True)
            held_as_one = {name: t.__dict__["_" + name] is None for name, _ in _tracker.COLUMNS}
            assert held_as_one == dict.fromkeys(held_as_one, True)  # nothing per parameter written
            assert (t.flat_buf, t.flat_consumed, t.flat_zero, t.flat_since) == (None, False, False, t.count)
            for _ in range(accumulate):
                (F.mse_loss(model(torch.randn(5, 4)), torch.randn(5, 1)) / accumulate).backward()
                assert t.flat_last == t.count and t.flat_buf is _tracker.MIXED
            opt.step()
            assert t.flat_since == t.count and t.flat_consumed is True and t.passes == []
        # Negative control: no zero_grad; the next pass adds onto applied gradient.
        F.mse_loss(model(torch.randn(5, 4)), torch.randn(5, 1)).backward()
        opt.step()
    assert [f.code for f in w.findings] == ["GG101"]


def _zero_fill(model, opt):
    opt.zero_grad(set_to_none=False)  # every buffer zero-filled in place at once


def _module_zero_grad(model, opt):
    model.zero_grad()


def _module_zero_fill(model, opt):
    model.zero_grad(set_to_none=False)


# name: (the clearing, where it runs: before each window or each micro-batch, the findings)
LOOPS = {
    "zero_fill": (_zero_fill, "step", []),
    "zero_fill_every_micro_batch": (_zero_fill, "micro", ["GG102"]),
    "module_zero_grad": (_module_zero_grad, "step", []),
    "module_zero_grad_every_micro_batch": (_module_zero_grad, "micro", ["GG102"]),
    "module_zero_fill": (_module_zero_fill, "step", []),
}


def _loop(clearing, where: str):
    import torch
    import torch.nn.functional as F

    import gradguard as gg

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with gg.watch(mode="record") as w:
        for i in range(12):
            if where == "micro" or i % 3 == 0:
                clearing(model, opt)
            (F.mse_loss(model(torch.randn(5, 4)), torch.randn(5, 1)) / 3).backward()
            if i % 3 == 2:
                opt.step()
        t = w._engine.tracker
        columns = {name: t.__dict__["_" + name] is None for name, _ in _tracker.COLUMNS}
    return [(f.code, f.line) for f in w.findings], columns


def _discarding_loop(two_optimizers: bool):
    """model.zero_grad(set_to_none=False) after every micro-batch (a discard bug) over parameters that not one
    optimizer holds: which pass dies at which buffer, and whose optimizer it was, decides the findings."""
    import torch
    import torch.nn.functional as F

    import gradguard as gg

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    opts = [torch.optim.SGD(model[0].parameters(), lr=0.01)]
    if two_optimizers:
        opts.append(torch.optim.SGD(model[2].parameters(), lr=0.01))
    with gg.watch(mode="record") as w:
        for opt in opts:
            opt.zero_grad()
        for i in range(10):
            (F.mse_loss(model(torch.randn(6, 4)), torch.randn(6, 1)) / 2).backward()
            model.zero_grad(set_to_none=False)
            if i % 2:
                for opt in opts:
                    opt.step()
    return [(f.code, f.line) for f in w.findings]


@pytest.mark.parametrize("two_optimizers", [False, True])
def test_a_zero_fill_that_discards_finds_what_buffer_by_buffer_finds(two_optimizers, monkeypatch):
    found = _discarding_loop(two_optimizers)
    assert {code for code, _ in found} == ({"GG110", "GG102"} if two_optimizers else {"GG110", "GG106"})
    per_position(monkeypatch)
    assert _discarding_loop(two_optimizers) == found


@pytest.mark.parametrize("name", LOOPS)
def test_clearings_in_columns_find_what_the_slow_paths_find(name, monkeypatch):
    clearing, where, expected = LOOPS[name]
    real, calls = _tracker.Tracker._zero_filled_all, []
    monkeypatch.setattr(_tracker.Tracker, "_zero_filled_all", lambda *a: calls.append(1) or real(*a))
    found, columns = _loop(clearing, where)
    assert [code for code, _ in found] == expected
    assert bool(calls) == (clearing is not _module_zero_grad)  # the column path is the one taken
    if where == "step":
        assert columns["since"] and columns["consumed"]  # the correct loop wrote no per-parameter list there
    per_position(monkeypatch)
    assert _loop(clearing, where)[0] == found
