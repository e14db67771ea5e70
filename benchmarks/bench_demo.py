"""How long ``gradguard demo`` takes: on an otherwise idle machine, and while another process keeps one core busy.

Each round runs the whole demo as a user does (``python -m gradguard demo``, a fresh
process, imports included) twice: once alone, once next to a busy process that this
script starts itself (a pure-Python spin loop, one core at 100 %) and stops afterwards.
With more than one round the order alternates, so that slow spells of a shared machine
hit both conditions alike. The figures are wall-clock seconds of the whole process; the
demo's CPU seconds are given too (they show how much of the wall time was waiting).

    python benchmarks/bench_demo.py              # one round: idle, then busy
    python benchmarks/bench_demo.py --rounds 3   # three rounds, median per condition

Targets: under 60 s on an idle 2-core machine, under 90 s with one core kept busy.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "out"
TARGETS = {"idle": 60.0, "one core busy": 90.0}
LIMIT_S = 600  # a run that takes this long is stopped: something is badly wrong


def run_demo(out_dir: str) -> dict:
    """One ``gradguard demo`` in a fresh process: wall and CPU seconds."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "gradguard", "demo", "--out", out_dir, "--no-progress"],
                   env=env, check=True, stdout=subprocess.DEVNULL, timeout=LIMIT_S)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1)}


def busy_process() -> subprocess.Popen:
    """A process that keeps one core at 100 % until it is stopped."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1, help="rounds of (idle, busy) runs, order alternating (default 1)")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")

    runs = {"idle": [], "one core busy": []}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = ("idle", "one core busy") if r % 2 == 0 else ("one core busy", "idle")
            for condition in order:
                busy = busy_process() if condition == "one core busy" else None
                try:
                    result = run_demo(os.path.join(tmp, f"demo-{r}-{len(runs[condition])}"))
                finally:
                    if busy is not None:
                        busy.kill()
                        busy.wait()
                runs[condition].append(result)
                print(f"round {r + 1}, {condition}: {result['wall_s']:.1f} s wall, {result['cpu_s']:.1f} s CPU", flush=True)

    summary = {
        "command": "python benchmarks/bench_demo.py" + (f" --rounds {args.rounds}" if args.rounds != 1 else ""),
        "cpus": os.cpu_count(),
        "load_average_before": [round(x, 2) for x in load_before],
        "python": platform.python_version(),
        "runs": runs,
        "median_wall_s": {c: statistics.median(r["wall_s"] for r in rs) for c, rs in runs.items()},
        "targets_s": TARGETS,
    }
    print(f"\n{'condition':<15} {'median wall (s)':>16} {'target (s)':>11}")
    for condition, target in TARGETS.items():
        wall = summary["median_wall_s"][condition]
        print(f"{condition:<15} {wall:>16.1f} {target:>11.0f}  {'met' if wall < target else 'NOT met'}")
    print(f"{os.cpu_count()} CPUs; load average before: {', '.join(f'{x:.2f}' for x in load_before)}")
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "bench_demo.json").write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
