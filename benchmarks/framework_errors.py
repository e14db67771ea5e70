"""How far each framework's accumulated update is from full-batch training, with and without gradguard.

Prints the figures of the README's framework section: the HF Trainer on tiny
config-built models of each family (padded rows of 3 to 12 tokens, K micro-
batches of 2 rows, one SGD step with lr=1, against the float64 full-batch
gradient of the token mean), and Lightning's final partial window (2
micro-batches where K=4). It reuses the test suite's models, data and
independent references (tests/test_integrations_*.py).

    PYTHONPATH=src python benchmarks/framework_errors.py [--k 4] [--families gpt2,bert,...]
"""

import argparse
import logging
import os
import sys
import tempfile
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
warnings.filterwarnings("ignore")
logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)


def hf(families, k):
    import transformers
    from test_integrations_transformers import (applied_error, family_model, family_reference, family_rows,
                                                family_trainer)

    from gradguard.integrations.transformers import exact

    transformers.logging.set_verbosity_error()
    print(f"HF Trainer, K={k}, {2 * k} padded rows: error of the applied update (stock | exact)")
    for kind in families:
        data = family_rows(kind, 2 * k)
        want = family_reference(family_model(kind), kind, data)
        with tempfile.TemporaryDirectory() as root:
            stock = applied_error(family_trainer(root, family_model(kind), data, k), want)
            fixed = applied_error(exact(family_trainer(root, family_model(kind), data, k)), want)
        print(f"  {type(family_model(kind)).__name__:32s} {stock:10.3g} | {fixed:.2g}")


def lightning_partial_window():
    import _integrations as S
    from test_integrations_lightning import fit

    from gradguard.integrations.lightning import ExactAccumulation

    data = S.batches(0, n=2, equal=True)  # one partial window: 2 equal micro-batches where K=4
    want = S.reference_params([data], None)
    with tempfile.TemporaryDirectory() as root:
        alone, _ = fit(data, root=root)
        fixed, _ = fit(data, callbacks=[ExactAccumulation()], root=root)
    init = [p.detach() for p in S.make_model().parameters()]
    ratio = sum(float(((a - p0) * (w - p0)).sum()) for a, w, p0 in zip(alone, want, init)) / \
        sum(float(((w - p0) ** 2).sum()) for w, p0 in zip(want, init))
    print(f"Lightning, final window of 2 micro-batches where K=4: update / full-batch update = {ratio:.4f} "
          f"(error {S.rel_change_error(alone, want):.3g}); with ExactAccumulation: error "
          f"{S.rel_change_error(fixed, want):.2g}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=4, help="micro-batches per optimizer step (default 4)")
    parser.add_argument("--families", default="llama,gpt2,bert,t5,bart,custom")
    args = parser.parse_args()
    hf(args.families.split(","), args.k)
    lightning_partial_window()
