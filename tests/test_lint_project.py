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


OWN_BASE = '''class Trainer:
    """The project's own trainer: no framework runs its methods."""

    def __init__(self, model, optimizer, loss_fn):
        self.model, self.optimizer, self.loss_fn = model, optimizer, loss_fn
'''

OWN_SUBCLASS = '''from .trainer import Trainer


class PPOTrainer(Trainer):
    def update(self, minibatches):
        for x, y in minibatches:
            self.loss_fn(self.model(x), y).backward()
            self.optimizer.step()
'''


def _own_tree(tmp_path, base):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "trainer.py").write_text(base)
    (pkg / "ppo.py").write_text(OWN_SUBCLASS)
    return pkg


def test_a_subclass_of_the_projects_own_trainer_is_checked(tmp_path):
    # the base resolves to a class of the linted tree that derives from nothing: the loop is the user's
    found = gg.lint_paths([_own_tree(tmp_path, OWN_BASE)])
    assert [(f.code, f.path.endswith("ppo.py")) for f in found] == [("GG101", True)]


HOOK_SUBCLASS = '''from .trainer import Trainer


class PPOTrainer(Trainer):
    def training_step(self, model, inputs):
        loss = self.loss_fn(model(inputs["x"]), inputs["y"])
        loss.backward()
        return loss.detach()
'''


def test_a_subclass_of_the_hf_trainer_through_the_project_keeps_its_hooks_to_the_framework(tmp_path):
    # over a base that derives from transformers.Trainer: a hook the framework calls is the framework's
    # (it clears and steps around it); a method holding its own loop over minibatches with the backward
    # pass and the step in it is the user's loop, which the framework never runs, read like raw PyTorch
    base = "from transformers import Trainer as HFTrainer\n\n\nclass Trainer(HFTrainer):\n    pass\n"
    pkg = _own_tree(tmp_path, base)
    assert [(f.code, f.path.endswith("ppo.py")) for f in gg.lint_paths([pkg])] == [("GG101", True)]
    (pkg / "ppo.py").write_text(HOOK_SUBCLASS)
    assert gg.lint_paths([pkg]) == []


def test_a_base_outside_the_linted_tree_is_judged_by_its_name_but_an_own_loop_is_read(tmp_path):
    # nothing to resolve `Trainer` with: it may be a framework's, so its hooks are left to it; the method
    # holding its own loop with the backward pass and the step is read all the same
    pkg = _own_tree(tmp_path, OWN_BASE)
    assert [f.code for f in gg.lint_paths([pkg / "ppo.py"])] == ["GG101"]
    (pkg / "ppo.py").write_text(HOOK_SUBCLASS)
    assert gg.lint_paths([pkg / "ppo.py"]) == []
