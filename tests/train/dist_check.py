#!/usr/bin/python3
"""Two runs of one config on different numbers of ranks against each other (tests/train/test_dist.sh).

    dist_check.py RUN_A RUN_B [--steps FIRST-LAST] [--loss-tol 1e-5] [--grads STEP --grad-tol 1e-5]
                  [--params-step S --params-tol T] [--layout]

Each check prints one line and the worst figure it found; the exit status is 1 when any fails.
  losses: every step's loss of B within loss-tol of A's, relative (the steps both have, or FIRST-LAST)
  grads:  RUN/grads-STEP.bin (FRAMECHAIN_TEST_GRADS_AT_STEP): max |a - b| / max |a|
  params: the weights of ckpt-S: mean |a - b| / |a| over the elements with |a| > 1e-3
  layout: the two checkpoints of step S have the same tensors (names, dtypes, shapes) and metadata keys
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from compare_runs import losses_by_step as losses  # noqa: E402
from safetensors_io import read_safetensors  # noqa: E402


def ckpt(run, step):
    return read_safetensors(os.path.join(run, "ckpt-%08d.safetensors" % step))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--steps")
    ap.add_argument("--loss-tol", type=float, default=1e-5)
    ap.add_argument("--grads", type=int)
    ap.add_argument("--grad-tol", type=float, default=1e-5)
    ap.add_argument("--params-step", type=int)
    ap.add_argument("--params-tol", type=float, default=1e-3)
    ap.add_argument("--layout", action="store_true")
    args = ap.parse_args()
    ok = True

    la, lb = losses(args.a), losses(args.b)
    steps = sorted(set(la) & set(lb))
    if args.steps:
        first, last = map(int, args.steps.split("-"))
        steps = [s for s in steps if first <= s <= last]
        if len(steps) != last - first + 1:
            print("losses: FAIL: steps %d-%d are not all in both runs' metrics" % (first, last))
            return 1
    if not steps:
        print("losses: FAIL: no step in both runs")
        return 1
    worst = max(abs(lb[s] - la[s]) / abs(la[s]) for s in steps)
    good = worst <= args.loss_tol
    print("losses: steps %d-%d, worst relative difference %.2e (limit %.0e) %s"
          % (steps[0], steps[-1], worst, args.loss_tol, "ok" if good else "FAIL"))
    ok &= good

    if args.grads is not None:
        name = "grads-%d.bin" % args.grads
        ga = np.fromfile(os.path.join(args.a, name), np.float32).astype(np.float64)
        gb = np.fromfile(os.path.join(args.b, name), np.float32).astype(np.float64)
        rel = np.abs(ga - gb).max() / np.abs(ga).max() if ga.size == gb.size and ga.size else np.inf
        good = rel <= args.grad_tol
        print("grads: step %d, %d values, max |a-b| / max |a| %.2e (limit %.0e) %s"
              % (args.grads, ga.size, rel, args.grad_tol, "ok" if good else "FAIL"))
        ok &= good

    if args.params_step is not None:
        (ta, ma), (tb, mb) = ckpt(args.a, args.params_step), ckpt(args.b, args.params_step)
        keys = [k for k in ta if k.startswith("model.")]
        pa = np.concatenate([ta[k].ravel() for k in keys]).astype(np.float64)
        pb = np.concatenate([tb[k].ravel() for k in keys]).astype(np.float64)
        big = np.abs(pa) > 1e-3
        rel = np.mean(np.abs(pb - pa)[big] / np.abs(pa)[big])
        good = rel <= args.params_tol
        print("params: step %d, mean |a-b|/|a| %.2e over %d elements (limit %.0e) %s"
              % (args.params_step, rel, big.sum(), args.params_tol, "ok" if good else "FAIL"))
        ok &= good
        if args.layout:
            same = (sorted(ta) == sorted(tb) and all(ta[k].dtype == tb[k].dtype and ta[k].shape == tb[k].shape
                                                     for k in ta) and sorted(ma) == sorted(mb))
            print("layout: %d tensors, %d metadata keys, names, dtypes and shapes %s"
                  % (len(ta), len(ma), "the same ok" if same else "differ FAIL"))
            ok &= same
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
