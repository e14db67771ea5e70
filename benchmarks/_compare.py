"""What the benchmark scripts share to compare two versions of gradguard in one process.

* :func:`load_copy`: a checkout's ``gradguard`` package, copied and imported under another name,
  so that two versions run side by side in the same rounds.
* :func:`bootstrap_median`: a 95 % interval for the median of paired per-round differences or ratios.

Not a script: the scripts import it (``benchmarks/`` is their first import path).
"""

from __future__ import annotations

import importlib
import random
import shutil
import statistics
import sys
import tempfile
from pathlib import Path


def load_copy(src, name: str = "gradguard_before"):
    """The ``gradguard`` package under ``src`` (a checkout's ``src`` folder), imported as ``name``.

    Its imports are relative, so the copy runs as a package of its own beside any other.
    """
    tmp = tempfile.mkdtemp(prefix=f"{name}_")
    shutil.copytree(Path(src) / "gradguard", Path(tmp) / name)
    sys.path.insert(0, tmp)
    return importlib.import_module(name)


def bootstrap_median(values, resamples: int = 2000):
    """A 95 % percentile-bootstrap interval for the median of ``values`` (fixed seed: the same data, the same interval)."""
    rng = random.Random(0)
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    return meds[int(0.025 * resamples)], meds[int(0.975 * resamples) - 1]
