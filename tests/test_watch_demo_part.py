"""The demo's run-time part and the two ways ``gradguard.watch`` is reached."""

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


def test_watch_is_callable_whether_the_name_holds_the_class_or_the_package():
    package = importlib.import_module("gradguard.watch")  # binds gradguard.watch to the package
    assert callable(package)
    w = gg.watch(mode="record")
    assert isinstance(w, package.watch) and w.mode == "record"
    assert package(mode="raise").mode == "raise"
