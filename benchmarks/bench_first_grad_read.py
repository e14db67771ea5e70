"""Who pays for the first Python access to a new ``.grad``: the watch's read of the ``.grad`` list, or the optimizer.

A backward pass makes each new ``.grad`` in C++; the first Python access to it
(``p.grad``) makes its Python object. In a plain loop the optimizer's step makes
that access; under the watch, the watch's read right after the pass does, and the
optimizer then finds the objects made. So part of the watch's own time (timed
inside its hooks by ``bench_watch.py --curve``) is work a plain step does anyway.
This measures that part: the optimizer's step timed after a backward pass, with and
without one read of the ``.grad`` list in between, interleaved step by step
(process CPU time, collector paused), N x ``Parameter(torch.randn(3))``, foreach SGD.
Example::

    python benchmarks/bench_first_grad_read.py --tensors 10000 --steps 30
"""

from __future__ import annotations

import argparse
import gc
import operator
import statistics
import sys
import time

import torch
from torch import nn


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tensors", type=int, default=10000, help="parameter tensors (default 10000)")
    parser.add_argument("--steps", type=int, default=30, help="steps per condition (default 30)")
    args = parser.parse_args(argv)
    if args.tensors < 1 or args.steps < 1:
        parser.error(f"--tensors {args.tensors} --steps {args.steps}: give counts of at least 1")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    params = [nn.Parameter(torch.randn(3)) for _ in range(args.tensors)]
    opt = torch.optim.SGD(params, lr=1e-3, foreach=True)
    grad = operator.attrgetter("grad")
    spent = {"step, no read before": [], "step, one read before": [], "the read": []}
    clock = time.process_time
    for i in range(args.steps * 2 + 2):
        read_first = i % 2 == 1
        opt.zero_grad(set_to_none=True)
        torch.stack([(p * p).sum() for p in params]).sum().backward()
        gc.collect()
        gc.disable()
        try:
            if read_first:
                c0 = clock()
                list(map(grad, params))
                read = clock() - c0
            c0 = clock()
            opt.step()
            took = clock() - c0
        finally:
            gc.enable()
        if i < 2:
            continue  # warm-up: the optimizer's state, the allocator
        if read_first:
            spent["the read"].append(read)
        spent["step, one read before" if read_first else "step, no read before"].append(took)
    med = {k: statistics.median(v) for k, v in spent.items()}
    saved = med["step, no read before"] - med["step, one read before"]
    print(f"{args.tensors} x Parameter(torch.randn(3)), foreach SGD; torch {torch.__version__}, 1 thread, CPU; "
          f"{args.steps} steps per condition, interleaved; medians, CPU ms")
    for k, v in med.items():
        print(f"  {k:24s} {v * 1e3:8.2f}")
    print(f"  the step is {saved * 1e3:.2f} ms faster after the read: {saved / med['the read'] * 100:.0f} % of the "
          "read is work the step does anyway")
    return 0


if __name__ == "__main__":
    sys.exit(main())
