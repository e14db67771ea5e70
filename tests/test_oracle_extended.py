"""The execution oracle's extended stream: shapes real code writes, each judged by running the program.

``generate.specs(..., extended=True)`` draws, from a second random stream, how the logged total is
computed (a helper returning ``float(l)`` / ``l.item()`` / ``l``, a second forward under
``torch.no_grad()``, a list bound afresh each micro-step), a clearing under ``if model is not None:``,
a subclass that sets the model and the optimizer, a run length read from a configuration value,
divisors counted in a pass before the loop and masked sums, and the step inside a helper that returns
whether it stepped. The checks here: earlier seeds render the very same programs; each dimension that
computes the same thing leaves the float64 truth unchanged (the coefficient of every micro-batch in
every step), the ones that change what a total holds change GG201 exactly where a graph is kept
(negative controls beside each); and a small seeded run of lint and watch judged against that truth.
"""

from __future__ import annotations

import dataclasses
import hashlib

import pytest

from _benchmarks import load

bench = load("oracle_bench")  # also puts benchmarks/ on sys.path, where the oracle package is

from oracle import generate, truth  # noqa: E402

EXTENDED = ("log_via", "clear_guard", "subclass", "run_length", "count", "masked", "step_helper")


def spec(**kw) -> generate.Spec:
    base = dict(seed=11, k=3, sizes=(2, 1, 3, 2, 2, 1, 3), condition="mod_plus1", clear_form="zero_grad",
                clear_place="after_step", division="len", remainder="in_condition", logging="item")
    base.update(kw)
    return generate.Spec(**base)


def judge(s: generate.Spec, form: str = "module") -> truth.Truth:
    x, y = generate.data_tensors(s)
    t = truth.run(generate.render(s, form), x, y)
    assert t.error is None, (t.error, generate.render(s, form))
    return t


def test_earlier_seeds_render_the_same_programs():
    """A spec drawn without the extended stream has every new dimension off, and its programs are
    byte for byte those of the generator before the stream existed (hash of seed 3's first 40 specs
    in every form, taken on that generator)."""
    h = hashlib.sha256()
    for s in generate.specs(40, seed=3):
        assert all(getattr(s, a) == f.default for a in EXTENDED for f in dataclasses.fields(s) if f.name == a)
        for form in generate.FORMS:
            h.update(generate.render(s, form).encode())
    assert h.hexdigest() == "0382ee0cbae2453998cca8a522bc3268ae22273f76fe35f9000f4a72c5033aa2"


def test_the_extended_stream_keeps_the_base_choices_of_its_seed():
    base = generate.specs(200, seed=4)
    ext = generate.specs(200, seed=4, extended=True)
    off = {f.name: f.default for f in dataclasses.fields(generate.Spec) if f.name in EXTENDED}
    assert [dataclasses.replace(e, **off) for e in ext] == base
    # every dimension is drawn both ways, and only where it applies
    for a in EXTENDED:
        assert len({getattr(e, a) for e in ext}) >= 2, a
    assert all(e.step_helper <= (e.condition in ("mod_plus1", "mod_k_minus1")) for e in ext)
    assert all(e.masked <= (e.division == "tokens") for e in ext)
    assert all(e.count == "inline" or e.division in ("len", "tokens", "grad_len") for e in ext)
    assert generate.specs(30, seed=4, extended=True) == ext[:30]  # reproducible


SAME = [  # (dimension values, base spec changes): what the program computes is unchanged
    (dict(clear_guard=True), dict(clear_form="grad_fill")),
    (dict(clear_guard=True), dict(clear_place="before_step")),  # negative control below: a discard stays one
    (dict(subclass=True, clear_guard=True), dict()),
    (dict(run_length="config"), dict(remainder="drop")),
    (dict(run_length="config"), dict(condition="inner", remainder="after_loop")),
    (dict(count="precounted"), dict()),
    (dict(count="precounted"), dict(division="grad_len", remainder="after_loop")),
    (dict(count="precounted", masked=True), dict(division="tokens", condition="counter")),
    (dict(count="precounted"), dict(division="tokens", condition="inner", remainder="drop")),
    (dict(step_helper=True), dict()),
    (dict(step_helper=True), dict(condition="mod_k_minus1", division="grad_K", clear_place="before_step")),
    (dict(step_helper=True, run_length="config"), dict(division="K", remainder="drop")),
]


@pytest.mark.parametrize("form", generate.FORMS)
@pytest.mark.parametrize("dims,base", SAME, ids=[f"{'-'.join(d)}-{'-'.join(f'{k}={v}' for k, v in b.items())}" for d, b in SAME])
def test_a_shape_that_computes_the_same_has_the_same_truth(dims, base, form):
    """The float64 reference: the shape off. Every step applies the same weights of the same micro-batches."""
    plain = judge(spec(**base), form)
    shaped = judge(spec(**base, **dims), form)
    assert shaped.coefficients == plain.coefficients and shaped.steps == plain.steps
    assert shaped.required == plain.required and shaped.accepted == plain.accepted
    assert (plain.final - shaped.final).abs().max() < 1e-12


def test_the_same_shapes_keep_the_defects_they_wrap():
    """Negative controls: a guarded clearing before the step still discards the window, a configured run
    length that drops a partial window still drops it, a step helper that never clears still goes stale."""
    assert "GG102" in judge(spec(clear_guard=True, clear_place="before_step")).required
    assert judge(spec(run_length="config", remainder="drop", division="tokens")).required == {"GG103"}
    assert judge(spec(run_length="config", remainder="drop", division="tokens", sizes=(2,) * 6)).required == set()  # K | 6
    assert "GG101" in judge(spec(step_helper=True, clear_place="missing"), "method").required
    assert judge(spec(count="precounted", division="tokens", masked=True)).required == set()
    assert "GG105" in judge(spec(count="precounted", division="K")).required  # unequal sizes, divided by K


@pytest.mark.parametrize("form", generate.FORMS)
@pytest.mark.parametrize("via", ["helper", "no_grad", "fresh_list"])
@pytest.mark.parametrize("logging", ["item", "item_weighted", "detach", "tensor"])
def test_a_logged_total_keeps_a_graph_only_where_it_holds_one(logging, via, form):
    """GG201 in the truth: a total of the loss tensor (from a helper, or the sum of a fresh list) keeps
    every pass's graph; Python numbers, detached values and a second forward under no_grad keep none."""
    t = judge(spec(logging=logging, log_via=via), form)
    kept = logging == "tensor" and via != "no_grad"
    assert ("GG201" in t.required) == kept, t.required
    inline = judge(spec(logging=logging), form)  # the reference: the same total written inline
    assert t.coefficients == inline.coefficients
    assert ("GG201" in inline.required) == (logging == "tensor")


def test_extended_programs_run_in_every_form_with_the_same_truth():
    for i, s in enumerate(generate.specs(8, seed=8, extended=True)):
        x, y = generate.data_tensors(s)
        verdicts = set()
        for form in generate.FORMS:
            t = truth.run(generate.render(s, form), x, y)
            assert t.error is None, (i, form, t.error)
            verdicts.add((tuple(sorted(t.required)), tuple(map(tuple, t.coefficients))))
        assert len(verdicts) == 1, (i, s)


def test_bench_extended_flag_and_failure_classes(tmp_path, capsys, monkeypatch):
    """The benchmark's --extended stream (a few specs), and the failure report naming the new choices."""
    import json
    import os

    from oracle import failures

    # main() puts the measured source tree on PYTHONPATH for the programs it runs; in this process that must not
    # outlive the test (later tests start fresh interpreters that must import what they install, not this checkout)
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))

    out = tmp_path / "o.json"
    assert bench.main(["--specs", "3", "--seed", "8", "--forms", "module", "--no-watch", "--jobs", "1", "--extended",
                       "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["extended"] is True and report["harness_errors"] == 0
    assert [generate.Spec(**dict(d["spec"], sizes=tuple(d["spec"]["sizes"]))) for d in report["specs_detail"].values()] \
        == generate.specs(3, seed=8, extended=True)
    capsys.readouterr()
    s = [spec(division="tokens", logging="tensor", log_via="fresh_list", step_helper=True),
         spec(division="tokens", clear_guard=True, subclass=True)]
    results = [bench.evaluate_spec((i, x, ("module", "method"), False)) for i, x in enumerate(s)]
    assert results[0]["rows"][0]["required"] == ["GG201"] and results[1]["rows"][1]["required"] == []
    for r in results:  # a linter right everywhere but on the guarded clearing, which it flags (tool-independent)
        for row in r["rows"]:
            row["lint"] = list(row["required"])
    results[1]["rows"][1]["lint"] = ["GG101"]
    summary = bench.summarise(results, ("lint",))
    summary["specs_detail"] = {str(r["index"]): r for r in results}
    text = failures.classes(summary)
    assert "### lint GG101 false positive" in text and "- clear_guard: True 1/" in text
    assert "if self.model is not None:" in text


def test_the_package_form_runs_its_helpers_from_another_module(tmp_path):
    """The package form: the function form's helpers in ``train_utils.py``, imported by the script.
    Same float64 truth as the one-file function form; lint reads the folder (both files), and the
    helpers module of one program never leaks into the next run (``sys.modules`` forgotten)."""
    import sys

    stale = spec(division="tokens", clear_place="missing")
    good = spec(division="tokens", step_helper=True, log_via="helper")
    for s in (stale, good):
        src, mods = generate.render(s, "package"), generate.modules(s, "package")
        assert list(mods) == ["train_utils.py"] and "from train_utils import" in src and "def clear_grads" not in src
        x, y = generate.data_tensors(s)
        t = truth.run(src, x, y, modules=mods)
        assert t.error is None and t.coefficients == judge(s, "function").coefficients
        assert "train_utils" not in sys.modules
    assert "GG101" in truth.run(generate.render(stale, "package"), *generate.data_tensors(stale),
                                modules=generate.modules(stale, "package")).required
    # negative control: without its module the script does not run (the helpers are not in it)
    assert truth.run(generate.render(good, "package"), *generate.data_tensors(good)).error.startswith("ModuleNotFound")
    assert generate.modules(good, "function") == {}
    row = bench.evaluate_spec((0, stale, ("package",), True))["rows"][0]
    assert row["error"] is None and "GG101" in row["required"] and "GG101" in row["watch"]
    assert not [p for p in __import__("os").listdir(bench._DIR) if p.startswith("p0_package")]  # cleaned up
