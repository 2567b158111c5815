#!/usr/bin/python3
"""Compare two training runs of the same config (for example fp32 AdamW against 8-bit AdamW).

    compare_runs.py RUN_A RUN_B [--window 20] [--params-step 50] [--curve-tol 0.02] [--params-tol T]

Prints the loss curves side by side as the mean loss over windows of steps (the steps both runs have
logged; a last window shorter than --window counts too), and the parameters' relative difference at
one checkpoint step. Exits 1 when a window's mean loss differs by more than --curve-tol (relative to
RUN_A) or is not finite, or the parameters differ by more than --params-tol; exits 2, with one line
saying why, when the runs cannot be compared (a missing run, metrics.jsonl or checkpoint, no step in
common, tensors of other names or shapes: runs of different architectures).
"""

import argparse
import json
import os
import re
import sys

try:
    import numpy as np
except ImportError as e:  # one line naming the module and the Python, not a traceback
    sys.exit("%s: %s cannot import %s (apt-get install python3-%s, or run it with a Python that has it)"
             % (os.path.basename(sys.argv[0]), sys.executable, e.name, (e.name or "?").split(".")[0]))

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_io import SafetensorsError, read_safetensors  # noqa: E402


class Refused(Exception):
    """The runs cannot be compared: one line saying why."""


# train writes its numbers with printf (%.6g): nan, -nan, inf and -inf where a value is not finite,
# which JSON does not allow. They become JSON's NaN / Infinity before the line is parsed.
_NONFINITE = re.compile(r"([:\[,]\s*)(-?)(nan|inf(?:inity)?)(?=\s*[,}\]])", re.IGNORECASE)


def _as_json(line):
    def repl(m):
        if m.group(3).lower() == "nan":
            return m.group(1) + "NaN"
        return m.group(1) + m.group(2) + "Infinity"
    return _NONFINITE.sub(repl, line)


def note(text):
    print("compare_runs: note: %s" % text, file=sys.stderr)


def losses_by_step(run):
    """A run's loss of each step, from its metrics.jsonl (the last line of a step counts). An
    unfinished last line (a run still training) is skipped with a note."""
    if not os.path.isdir(run):
        raise Refused("%s: no such run folder" % run)
    path = os.path.join(run, "metrics.jsonl")
    try:
        with open(path, "rb") as f:
            lines = f.read().decode("utf-8", "replace").split("\n")
    except OSError as e:
        raise Refused("%s: cannot read: %s" % (path, e.strerror))
    if lines and lines[-1] == "":
        lines.pop()  # the text after the last newline: nothing
    out = {}
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rec = json.loads(_as_json(line))
            step, loss = rec["step"], rec["loss"]
            if not isinstance(step, int) or isinstance(step, bool) or not isinstance(loss, (int, float)):
                raise ValueError("step or loss is not a number")
        except (ValueError, KeyError, TypeError) as e:
            if i == len(lines) - 1:
                note("%s: line %d is unfinished (a run still training?): skipped" % (path, i + 1))
                continue
            why = "no key %s" % e if isinstance(e, KeyError) else str(e).split(":")[0]
            raise Refused("%s: line %d is not a step's record (%s)" % (path, i + 1, why))
        out[step] = float(loss)
    return out


def step_span(steps):
    return "steps %d-%d" % (min(steps), max(steps)) if steps else "no steps"


def common_steps(a, b, la, lb):
    common = sorted(set(la) & set(lb))
    if not common:
        raise Refused("%s and %s have no step in common (%s: %s; %s: %s): not comparable"
                      % (a, b, os.path.basename(a), step_span(la), os.path.basename(b), step_span(lb)))
    if len(common) < max(len(la), len(lb)):
        note("the %d steps both runs logged are compared (%s: %d, %s: %d)"
             % (len(common), os.path.basename(a), len(la), os.path.basename(b), len(lb)))
    return common


def compare_curves(a, b, la, lb, common, window, tol):
    """Windows of the steps both runs logged: prints them, returns whether the curves agree."""
    windows = {}
    for s in common:  # window k holds steps k*window+1 .. (k+1)*window; the last may hold fewer
        windows.setdefault((s - 1) // window, []).append(s)
    worst, nonfinite = 0.0, 0
    print("steps        %-10s %-10s rel.diff" % (os.path.basename(a)[:10], os.path.basename(b)[:10]))
    for k in sorted(windows):
        steps = windows[k]
        ma, mb = np.mean([la[s] for s in steps]), np.mean([lb[s] for s in steps])
        with np.errstate(all="ignore"):
            rel = abs(mb - ma) / abs(ma) if ma != mb else 0.0
        if not (np.isfinite(ma) and np.isfinite(mb)):  # both inf are equal, and no curve
            rel = float("nan")
        if np.isfinite(rel):
            worst = max(worst, rel)
        else:
            nonfinite += 1
        print("%4d-%-4d    %-10.5f %-10.5f %.4f%s" % (steps[0], steps[-1], ma, mb, rel,
                                                     "" if len(steps) == window else "  (%d steps)" % len(steps)))
    ok = worst <= tol and not nonfinite
    print("curve: worst window %.4f (limit %.3f) of %d windows%s %s"
          % (worst, tol, len(windows), " (%d not finite)" % nonfinite if nonfinite else "", "ok" if ok else "FAIL"))
    return ok


def checkpoint(run, step):
    path = os.path.join(run, "ckpt-%08d.safetensors" % step)
    if not os.path.exists(path):
        have = sorted(int(n[5:13]) for n in os.listdir(run) if re.fullmatch(r"ckpt-\d{8}\.safetensors", n))
        raise Refused("%s: no checkpoint of step %d (%s; --params-step picks one)"
                      % (path, step, "the run has steps " + ", ".join(map(str, have)) if have else "the run has none"))
    try:
        tensors, _ = read_safetensors(path)
    except SafetensorsError as e:
        raise Refused(str(e))
    except OSError as e:
        raise Refused("%s: cannot read: %s" % (path, e.strerror))
    tensors = {k: v for k, v in tensors.items() if k.startswith("model.")}
    if not tensors:
        raise Refused("%s: no model.* tensor in it (not a framechain checkpoint?)" % path)
    return tensors


def same_tensors(a, b, ta, tb):
    """Refused unless the two checkpoints' model tensors have the same names and shapes."""
    only_a = [k for k in ta if k not in tb]
    only_b = [k for k in tb if k not in ta]
    if only_a or only_b:
        raise Refused("the runs' tensor names differ (different architectures?): %d only in %s (%s), %d only in %s (%s)"
                      % (len(only_a), a, only_a[0] if only_a else "-", len(only_b), b, only_b[0] if only_b else "-"))
    for k in ta:
        if ta[k].shape != tb[k].shape:
            raise Refused("%s is %s in %s but %s in %s (different architectures?)"
                          % (k, "x".join(map(str, ta[k].shape)), a, "x".join(map(str, tb[k].shape)), b))


def compare_params(ta, tb, step, tol):
    keys = list(ta)
    pa = np.concatenate([ta[k].ravel() for k in keys]).astype(np.float64)
    pb = np.concatenate([tb[k].ravel() for k in keys]).astype(np.float64)
    with np.errstate(all="ignore"):
        norm_rel = np.linalg.norm(pb - pa) / np.linalg.norm(pa)
    # bitsandbytes' measure: mean of |a - b| / (|a| + eps) over the elements, here over the
    # elements that are not near zero (adaLN-Zero starts many weights at exactly 0).
    big = np.abs(pa) > 1e-3
    mean_rel = np.mean(np.abs(pb - pa)[big] / np.abs(pa)[big]) if big.any() else 0.0
    params_ok = bool(mean_rel <= tol)  # a NaN is no pass
    print("params: at step %d, mean |a-b|/|a| %.2e over %d elements with |a| > 1e-3, ||a-b||/||a|| %.2e "
          "(limit %.2e) %s" % (step, mean_rel, big.sum(), norm_rel, tol, "ok" if params_ok else "FAIL"))
    return params_ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--window", type=int, default=20)
    ap.add_argument("--params-step", type=int, default=50)
    ap.add_argument("--curve-tol", type=float, default=0.02)
    ap.add_argument("--params-tol", type=float, default=0.05)
    args = ap.parse_args()
    if args.window < 1:
        ap.error("--window %d: give a whole number of steps, 1 or more" % args.window)
    try:  # everything read and checked before a line is printed: a refusal is one line
        la, lb = losses_by_step(args.a), losses_by_step(args.b)
        for run, losses in ((args.a, la), (args.b, lb)):
            if not losses:
                raise Refused("%s: no step's record in it" % os.path.join(run, "metrics.jsonl"))
        common = common_steps(args.a, args.b, la, lb)
        ta, tb = checkpoint(args.a, args.params_step), checkpoint(args.b, args.params_step)
        same_tensors(args.a, args.b, ta, tb)
    except Refused as e:
        print("compare_runs: %s" % e, file=sys.stderr)
        return 2
    curve_ok = compare_curves(args.a, args.b, la, lb, common, args.window, args.curve_tol)
    params_ok = compare_params(ta, tb, args.params_step, args.params_tol)
    return 0 if curve_ok and params_ok else 1


if __name__ == "__main__":
    sys.exit(main())
