"""The demo's run-time part, and ``gradguard.watch`` being the watch class."""

import importlib

import gradguard as gg


def test_watch_part_reports_each_buggy_loop(tmp_path):
    from gradguard.demo.watch_part import run_watch_part

    lines = []
    summary = run_watch_part(tmp_path, print_fn=lines.append)
    assert summary["by_loop"] == {
        "forgot_zero_grad": ["GG101"],
        "zero_grad_every_microbatch": ["GG102", "GG103"],
        "unscaled_accumulation_and_dropped_remainder": ["GG104", "GG103"],
    }
    assert summary["findings"] == 5 and summary["codes"] == ["GG101", "GG102", "GG103", "GG104"]
    text = "\n".join(lines)
    assert "run-time watch" in lines[0]
    assert "buggy_loop.py:22 (step 2; params: 0.weight, 0.bias, 2.weight, 2.bias)" in text
    assert "> optimizer.step()  # .grad still holds every earlier batch" in text
    assert list(tmp_path.iterdir()) == []  # writes nothing


def test_gg_watch_is_the_class_even_after_the_package_is_imported():
    importlib.import_module("gradguard.watcher._session")  # what the CLI and the pytest plugin end up importing
    from gradguard.watcher import watch

    assert gg.watch is watch
    assert isinstance(gg.watch(mode="record"), watch)
