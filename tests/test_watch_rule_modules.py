"""The watch's rule modules and the dispatch built from them agree: a rule that defines an event
function runs on that event, and every run-time rule of the catalogue has its module."""

from __future__ import annotations

import inspect

import pytest

import gradguard
from gradguard.watcher import rules as watch_rules

MODULES = sorted(watch_rules.MODULES.values(), key=lambda m: m.CODE)


def _defined_events(module) -> set:
    """The event functions ``module`` defines itself (not ones it imports)."""
    return {name for name in watch_rules.EVENTS
            if inspect.isfunction(getattr(module, name, None)) and getattr(module, name).__module__ == module.__name__}


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.CODE)
def test_declared_events_are_the_defined_ones(module):
    declared = set(module.EVENTS)
    assert declared <= set(watch_rules.EVENTS), f"{module.__name__} declares unknown events {declared - set(watch_rules.EVENTS)}"
    assert _defined_events(module) == declared, (
        f"{module.__name__}: defines {sorted(_defined_events(module))}, declares {sorted(declared)} in EVENTS")
    for key in module.EVENTS.values():
        assert isinstance(key, int)


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.CODE)
def test_module_named_for_its_code(module):
    assert module.__name__.rsplit(".", 1)[1] == module.CODE.lower()


def test_order_keys_are_unique_per_event():
    # Two rules with one key would run in file order: the order of findings must be written down.
    for event in watch_rules.EVENTS:
        keys = [m.EVENTS[event] for m in MODULES if event in m.EVENTS]
        assert len(keys) == len(set(keys)), f"{event}: order keys {sorted(keys)} repeat"


def test_every_defined_event_function_is_dispatched():
    for module in MODULES:
        for event in _defined_events(module):
            assert getattr(module, event) in watch_rules.DISPATCH[event], f"{module.CODE}.{event} never runs"


def test_dispatch_order_is_the_written_order():
    # The order findings of one event come in (and the first one "raise" mode raises); these are the
    # tuples the package wrote by hand before they were derived from EVENTS. A rule added later may
    # take any place: only the order of these among themselves is pinned (adding a rule edits no test).
    names = {event: [f.__module__.rsplit(".", 1)[1] for f in fns] for event, fns in watch_rules.DISPATCH.items()}
    written = {
        "at_step": ["gg101", "gg108", "gg107", "gg111", "gg102", "gg114"],
        "at_window": ["gg109", "gg104", "gg105", "gg113"],
        "at_end": ["gg103", "gg106", "gg105", "gg108"],
        "at_empty_step": ["gg102", "gg110"],
        "at_every_step": ["gg103"],
    }
    for event, order in written.items():
        assert [name for name in names[event] if name in order] == order, (event, names[event])


def test_every_runtime_rule_has_a_watch_module():
    runtime = {code for code, rule in gradguard.RULES.items() if rule.runtime}
    assert runtime == set(watch_rules.MODULES), (
        f"no watch module: {sorted(runtime - set(watch_rules.MODULES))}; "
        f"module of a rule the catalogue calls lint-only: {sorted(set(watch_rules.MODULES) - runtime)}")


def test_a_module_missing_a_declared_event_is_caught(monkeypatch):
    # Negative control: the check above fails on a module that declares an event it does not define,
    # and on one that defines an event function it does not declare.
    gg107 = watch_rules.MODULES["GG107"]
    monkeypatch.setattr(gg107, "EVENTS", {**gg107.EVENTS, "at_end": 99})
    with pytest.raises(AssertionError):
        test_declared_events_are_the_defined_ones(gg107)
    monkeypatch.setattr(gg107, "EVENTS", {})
    with pytest.raises(AssertionError):
        test_declared_events_are_the_defined_ones(gg107)


def test_every_lint_rule_of_the_catalogue_has_a_lint_module():
    # The other half of the README's watch/lint columns (generated from the catalogue's flags).
    from gradguard.lint.rules import RULE_MODULES

    static = {code for code, rule in gradguard.RULES.items() if rule.static}
    assert static == {m.CODE for m in RULE_MODULES}
