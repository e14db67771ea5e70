"""Facts one file of the linted tree states about another's classes (the HF Trainer's loss scaling)."""

import gradguard as gg

BASE = '''from transformers import Trainer


class PreferenceTrainer(Trainer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.model_accepts_loss_kwargs = {flag}
'''

SUBCLASS = '''from .base import PreferenceTrainer


class PairTrainer(PreferenceTrainer):
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        return model(**inputs).loss
'''


def _tree(tmp_path, flag):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "base.py").write_text(BASE.format(flag=flag))
    (pkg / "pair.py").write_text(SUBCLASS)
    return pkg


def test_a_base_in_another_file_that_lets_the_trainer_scale_silences_gg301(tmp_path):
    pkg = _tree(tmp_path, "False")
    assert [f.code for f in gg.lint_paths([pkg])] == []


def test_the_same_tree_without_the_flag_is_reported(tmp_path):
    # negative control: a base that leaves the Trainer's decision alone
    pkg = _tree(tmp_path, "True")
    found = gg.lint_paths([pkg])
    assert [(f.code, f.path.endswith("pair.py")) for f in found] == [("GG301", True)]


def test_the_subclass_linted_alone_cannot_see_the_base(tmp_path):
    # what is not in the linted tree is not known: the finding stays, as before
    pkg = _tree(tmp_path, "False")
    assert [f.code for f in gg.lint_paths([pkg / "pair.py"])] == ["GG301"]


def test_a_class_of_the_same_name_in_another_file_does_not_speak_for_this_one(tmp_path):
    # a fixed copy of a trainer (the flag set) linted beside the original (the flag in a comment):
    # each file's own class decides, so the original is still reported and the copy is not
    source = '''from transformers import Trainer


class DistillTrainer(Trainer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        {line}

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        return model(**inputs).loss
'''
    (tmp_path / "fixed.py").write_text(source.format(line="self.model_accepts_loss_kwargs = False"))
    (tmp_path / "original.py").write_text(source.format(line="# self.model_accepts_loss_kwargs = False"))
    found = gg.lint_paths([tmp_path])
    assert [(f.code, f.path.endswith("original.py")) for f in found] == [("GG301", True)]
