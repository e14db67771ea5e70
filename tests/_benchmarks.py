"""What the tests of the benchmark scripts share: loading a script as a module, and busy work of a known length."""

import importlib.util
import sys
import time
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def load(name: str):
    """``benchmarks/<name>.py`` as a module (the scripts are not a package; they import ``benchmarks/_compare.py``)."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def busy(seconds: float, clock=time.perf_counter) -> None:
    """Spin for ``seconds`` of ``clock``."""
    end = clock() + seconds
    while clock() < end:
        pass
