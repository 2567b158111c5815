#!/usr/bin/python3
"""Compare two training runs of the same config (for example fp32 AdamW against 8-bit AdamW).

    compare_runs.py RUN_A RUN_B [--window 20] [--params-step 50] [--curve-tol 0.02] [--params-tol T]

Prints the loss curves side by side as the mean loss over windows of steps, and the parameters'
relative difference at one checkpoint step. Exits 1 when a window's mean loss differs by more than
--curve-tol (relative to RUN_A) or the parameters by more than --params-tol.
"""

import argparse
import json
import os
import sys

try:
    import numpy as np
except ImportError as e:  # one line naming the module and the Python, not a traceback
    sys.exit("%s: %s cannot import %s (apt-get install python3-%s, or run it with a Python that has it)"
             % (os.path.basename(sys.argv[0]), sys.executable, e.name, (e.name or "?").split(".")[0]))

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_io import read_safetensors  # noqa: E402


def losses_by_step(run):
    """A run's loss of each step, from its metrics.jsonl (the last line of a step counts)."""
    out = {}
    with open(os.path.join(run, "metrics.jsonl")) as f:
        for line in f:
            rec = json.loads(line)
            out[rec["step"]] = rec["loss"]
    return out


def losses(run):
    out = losses_by_step(run)
    return [out[k] for k in sorted(out)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--window", type=int, default=20)
    ap.add_argument("--params-step", type=int, default=50)
    ap.add_argument("--curve-tol", type=float, default=0.02)
    ap.add_argument("--params-tol", type=float, default=0.05)
    args = ap.parse_args()

    la, lb = losses(args.a), losses(args.b)
    n = min(len(la), len(lb))
    ok = True
    worst = 0.0
    print("steps        %-10s %-10s rel.diff" % (os.path.basename(args.a)[:10], os.path.basename(args.b)[:10]))
    for s in range(0, n - args.window + 1, args.window):
        ma, mb = np.mean(la[s:s + args.window]), np.mean(lb[s:s + args.window])
        rel = abs(mb - ma) / ma
        worst = max(worst, rel)
        print("%4d-%-4d    %-10.5f %-10.5f %.4f" % (s + 1, s + args.window, ma, mb, rel))
    curve_ok = worst <= args.curve_tol
    print("curve: worst window %.4f (limit %.3f) %s" % (worst, args.curve_tol, "ok" if curve_ok else "FAIL"))
    ok &= curve_ok

    name = "ckpt-%08d.safetensors" % args.params_step
    ta, _ = read_safetensors(os.path.join(args.a, name))
    tb, _ = read_safetensors(os.path.join(args.b, name))
    keys = [k for k in ta if k.startswith("model.")]
    pa = np.concatenate([ta[k].ravel() for k in keys]).astype(np.float64)
    pb = np.concatenate([tb[k].ravel() for k in keys]).astype(np.float64)
    norm_rel = np.linalg.norm(pb - pa) / np.linalg.norm(pa)
    # bitsandbytes' measure: mean of |a - b| / (|a| + eps) over the elements, here over the
    # elements that are not near zero (adaLN-Zero starts many weights at exactly 0).
    big = np.abs(pa) > 1e-3
    mean_rel = np.mean(np.abs(pb - pa)[big] / np.abs(pa)[big])
    params_ok = mean_rel <= args.params_tol
    print("params: at step %d, mean |a-b|/|a| %.2e over %d elements with |a| > 1e-3, ||a-b||/||a|| %.2e "
          "(limit %.2e) %s" % (args.params_step, mean_rel, big.sum(), norm_rel, args.params_tol,
                               "ok" if params_ok else "FAIL"))
    ok &= params_ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
