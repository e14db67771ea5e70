"""The demo's main part: accumulation schemes against the full batch, on real text.

One optimizer step sees a window of ``WINDOW`` paragraphs. It is trained three
ways from one initialisation, on one data order:

* **full batch**: one backward pass over the whole window (K = 1);
* **divide-by-K**: K micro-batches, each micro-batch's mean loss divided by K,
  summed in ``.grad``: what HF Accelerate, PyTorch Lightning and DeepSpeed do
  with gradient accumulation;
* **gradguard**: K micro-batches through ``gg.Accumulator(opt, steps=K)`` with
  ``acc.backward(loss, count=n_tokens)``.

Everything here runs in float64, so that rounding (about 1e-16) can neither hide
a difference nor fake one.
"""

from __future__ import annotations

import math
from typing import Dict, List, Sequence

import torch

from .._batch import split_sizes
from .text import Batch, ByteLM, collate, heldout_loss, mean_loss, paragraphs, split_heldout, token_count

WINDOW = 16  # paragraphs per optimizer step
KS = (4, 16)  # micro-batches per step, besides the full batch (K = 1)
SWEEP_KS = (2, 4, 8, 16)  # micro-batches per step in the gradient-error sweep
SWEEP_WINDOWS = 4  # windows the gradient error is averaged over
HELDOUT = 64  # paragraphs held out for the loss curves
MAX_BYTES = 64  # longer paragraphs are cut, as a tokenizer's truncation would
LR = 3e-3
LAYERS = 1
DIM = 32
DEFAULT_STEPS = 30
FULL = "full batch"
DIVIDE = "divide-by-K"
GRADGUARD = "gradguard"
#: the full batch again with the window's paragraphs in reverse order: the same sum, rounded
#: differently. Its distance from the full batch is what rounding alone produces.
REORDERED = "full batch, reordered"


class Corpus:
    """Training paragraphs in a fixed shuffled order and the held-out batches."""

    def __init__(self) -> None:
        self.train, heldout = split_heldout(paragraphs(max_len=MAX_BYTES), HELDOUT)
        self.heldout = [collate(heldout[i : i + 32]) for i in range(0, len(heldout), 32)]

    def window(self, step: int) -> List[bytes]:
        """The paragraphs of optimizer step ``step`` (0-based); wraps into the next epoch."""
        n = len(self.train)
        return [self.train[(step * WINDOW + i) % n] for i in range(WINDOW)]


def micro_batches(window: Sequence[bytes], k: int) -> List[Batch]:
    """``window`` as ``k`` consecutive micro-batches, each padded to its own longest paragraph.

    The sizes are the ones ``check_equivalence`` and ``accumulate_batch`` use for the
    same split (:func:`gradguard._batch.split_sizes`).
    """
    parts, start = [], 0
    for size in split_sizes(k, len(window)):
        parts.append(collate(window[start : start + size]))
        start += size
    return parts


def new_model(seed: int = 0) -> ByteLM:
    torch.manual_seed(seed)
    return ByteLM(dim=DIM, layers=LAYERS, max_len=MAX_BYTES).double()


def relative_distance(got: Sequence[torch.Tensor], want: Sequence[torch.Tensor]) -> float:
    """``||got - want|| / ||want||`` over all tensors taken as one vector."""
    num = sum(float(((g.detach() - w.detach()) ** 2).sum()) for g, w in zip(got, want))
    den = sum(float((w.detach()**2).sum()) for w in want)
    return math.sqrt(num / den)


class _KeepGrads(torch.optim.Optimizer):
    """An optimizer whose step only copies the gradients: what the Accumulator hands over."""

    def __init__(self, params) -> None:
        super().__init__(params, {})
        self.grads: List[torch.Tensor] = []

    @torch.no_grad()
    def step(self, closure=None):
        self.grads = [p.grad.clone() for group in self.param_groups for p in group["params"]]


def _grads(model) -> List[torch.Tensor]:
    return [p.grad.clone() for p in model.parameters()]


def full_gradients(model, window: Sequence[bytes]) -> Dict[str, List[torch.Tensor]]:
    """The full-batch gradient of one window at the model's current weights, and the same with the paragraphs reversed."""
    out = {}
    for name, seqs in ((FULL, window), (REORDERED, window[::-1])):
        model.zero_grad(set_to_none=True)
        mean_loss(model, collate(seqs)).backward()
        out[name] = _grads(model)
    return out


def accumulated_gradients(model, window: Sequence[bytes], k: int) -> Dict[str, List[torch.Tensor]]:
    """The gradient divide-by-K and gradguard hand the optimizer for one window of ``k`` micro-batches."""
    import gradguard as gg

    out = {}
    mbs = micro_batches(window, k)
    model.zero_grad(set_to_none=True)
    for mb in mbs:
        (mean_loss(model, mb) / k).backward()
    out[DIVIDE] = _grads(model)
    model.zero_grad(set_to_none=True)
    keep = _KeepGrads(model.parameters())
    acc = gg.Accumulator(keep, steps=k)
    for mb in mbs:
        acc.backward(mean_loss(model, mb), count=token_count(mb))
        acc.step()
    out[GRADGUARD] = keep.grads
    return out


def gradient_error_sweep(corpus: Corpus, ks: Sequence[int] = SWEEP_KS, windows: int = SWEEP_WINDOWS, progress=iter) -> Dict[str, dict]:
    """Mean relative gradient error against the full batch over the first ``windows`` windows, at the initial weights.

    Returns ``{"divide-by-K": {k: error}, "gradguard": {k: error}, "full batch, reordered": error}``.
    """
    model = new_model()
    errors: Dict[str, dict] = {DIVIDE: {k: 0.0 for k in ks}, GRADGUARD: {k: 0.0 for k in ks}, REORDERED: 0.0}
    for w in progress(range(windows)):
        window = corpus.window(w)
        full = full_gradients(model, window)
        errors[REORDERED] += relative_distance(full[REORDERED], full[FULL]) / windows
        for k in ks:
            grads = accumulated_gradients(model, window, k)
            for scheme in (DIVIDE, GRADGUARD):
                errors[scheme][k] += relative_distance(grads[scheme], full[FULL]) / windows
    return errors


def eval_steps(steps: int, points: int = 6) -> List[int]:
    """Steps after which the held-out loss is measured: 0 (the initialisation), about ``points`` more, and the last."""
    every = max(1, steps // points)
    return sorted(set(range(0, steps + 1, every)) | {steps})


def train_side_by_side(corpus: Corpus, steps: int, ks: Sequence[int] = KS, progress=iter) -> dict:
    """Train the full batch and, for each K, divide-by-K and gradguard, in lockstep on the same windows.

    Returns ``{"eval_steps": [...], "heldout_loss": {run: [...]}, "weight_distance": {run: [...]}}``;
    run names are ``"full batch"``, ``"full batch, reordered"`` (the rounding-only reference)
    and ``"divide-by-K, K=4"``-style; weight distances are
    ``||w_run - w_full|| / ||w_full||`` after each optimizer step 1..steps.
    """
    import gradguard as gg

    init = new_model().state_dict()
    runs = {FULL: None, REORDERED: None}
    for k in ks:
        runs[run_name(DIVIDE, k)] = k
        runs[run_name(GRADGUARD, k)] = k
    models, opts, accs = {}, {}, {}
    for name in runs:
        model = new_model()
        model.load_state_dict(init)
        models[name] = model
        opts[name] = torch.optim.AdamW(model.parameters(), lr=LR)
        if name.startswith(GRADGUARD):
            accs[name] = gg.Accumulator(opts[name], steps=runs[name])

    at = eval_steps(steps)
    losses: Dict[str, List[float]] = {name: [] for name in runs}
    distance: Dict[str, List[float]] = {name: [] for name in runs if name != FULL}

    def evaluate():
        for name, model in models.items():
            losses[name].append(heldout_loss(model, corpus.heldout))

    evaluate()
    for step in progress(range(steps)):
        window = corpus.window(step)
        model, opt = models[FULL], opts[FULL]
        mean_loss(model, collate(window)).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        model, opt = models[REORDERED], opts[REORDERED]
        mean_loss(model, collate(window[::-1])).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        for k in ks:
            mbs = micro_batches(window, k)
            name = run_name(DIVIDE, k)
            model, opt = models[name], opts[name]
            for mb in mbs:
                (mean_loss(model, mb) / k).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            name = run_name(GRADGUARD, k)
            model, acc = models[name], accs[name]
            for mb in mbs:
                acc.backward(mean_loss(model, mb), count=token_count(mb))
                acc.step()
        reference = list(models[FULL].parameters())
        for name in distance:
            distance[name].append(relative_distance(list(models[name].parameters()), reference))
        if step + 1 in at:
            evaluate()
    for acc in accs.values():
        acc.flush()  # every window here is full, so this steps nothing; a loop over an epoch's end needs it
    return {"eval_steps": at, "heldout_loss": losses, "weight_distance": distance}


def run_name(scheme: str, k: int) -> str:
    return f"{scheme}, K={k}"
