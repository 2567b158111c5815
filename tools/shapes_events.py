#!/usr/bin/python3
"""What the moving shapes' score over the next 40 frames owes to their bounces and meetings.

For each clip of an eval TSV scored from 7 given frames (make eval's shapes48_given7: shapes:1000001
to shapes:1000048), build/draw_shapes --events counts what no motion measured from frames 0-6 can
know, in frames 7-46: bounces off the frame's edges and frames where two shapes' bounding circles
overlap. Prints the chain's gain over repeating frame 6 (each clip's `clip` row: PSNR chain - copy)
by the clips' bounces and meetings, and its least-squares fit on them with standard errors.

usage: tools/shapes_events.py [--level L] [TSV] [FIRST_CLIP]
       (default out/eval-unseen/shapes48_given7.tsv, clips numbered from shapes:1000001)

--level L  the noise-aug level whose clip rows are read (eval scores each level of --noise-aug on its
           own: a default eval's TSV holds levels 0 and 0.1); default the first level in the file.
           The first line of the output names the level read.
The fit needs more than 3 clips. $BUILD/draw_shapes (default build/) counts the events.
"""
import os
import subprocess
import sys
import warnings

try:
    import numpy as np
except ImportError as e:  # one line naming the module and the Python, not a traceback
    sys.exit("%s: %s cannot import %s (apt-get install python3-%s, or run it with a Python that has it)"
             % (os.path.basename(sys.argv[0]), sys.executable, e.name, (e.name or "?").split(".")[0]))

USAGE = "usage: tools/shapes_events.py [--level L] [TSV] [FIRST_CLIP]"


def number(text):
    """A float of text, or None."""
    try:
        return float(text)
    except ValueError:
        return None


def parse_args(args):
    level, rest = None, []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--level" or a.startswith("--level="):
            if a == "--level":
                if i + 1 == len(args):
                    sys.exit("shapes_events: --level needs a noise-aug level (such as 0 or 0.1)")
                i += 1
                value = args[i]
            else:
                value = a[len("--level="):]
            level = number(value)
            if level is None:
                sys.exit("shapes_events: --level %s: not a number (a noise-aug level, such as 0 or 0.1)" % value)
        elif a.startswith("-"):
            sys.exit(USAGE)
        else:
            rest.append(a)
        i += 1
    if len(rest) > 2 or (len(rest) == 2 and not rest[1].isdigit()):
        sys.exit(USAGE)
    tsv = rest[0] if rest else "out/eval-unseen/shapes48_given7.tsv"
    first = int(rest[1]) if len(rest) > 1 else 1000001
    return tsv, first, level


def clip_rows(tsv):
    """level text -> {clip number: PSNR chain - copy}, the levels in the order of the file."""
    try:
        with open(tsv) as f:
            rows = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        sys.exit("%s: %s (make eval writes it; or name an eval TSV)" % (tsv, getattr(e, "strerror", None) or e))
    levels = {}
    for i, line in enumerate(rows):  # the settings' '#' lines before the header are no clip row
        f = line.split("\t")
        if f[0] != "clip":
            continue
        level = number(f[1]) if len(f) > 4 else None
        chain, copy = (number(f[3]), number(f[4])) if len(f) > 4 else (None, None)
        if level is None or chain is None or copy is None or not f[2].isdigit() or int(f[2]) < 1:
            sys.exit("%s: line %d: a clip row of eval --tsv has its level, clip number, PSNR chain and copy in "
                     "columns 2-5" % (tsv, i + 1))
        levels.setdefault(f[1], {})[int(f[2])] = chain - copy
    return levels


def main():
    args = sys.argv[1:]
    if args in (["--help"], ["-h"]):
        print(__doc__.strip())
        return
    tsv, first, want = parse_args(args)
    levels = clip_rows(tsv)
    if not levels:
        sys.exit("%s: no clip rows (an eval TSV of framechain eval --tsv)" % tsv)
    names = list(levels)
    if want is None:
        level = names[0]
    else:
        level = next((l for l in names if float(l) == want), None)
        if level is None:
            sys.exit("%s: no clip rows at noise-aug level %g (the file's levels: %s)" % (tsv, want, ", ".join(names)))
    gain = levels[level]
    clips = sorted(gain)
    if len(clips) <= 3:
        sys.exit("%s: %d clip%s at noise-aug level %s: the fit needs more than 3 (an eval of more --clips)"
                 % (tsv, len(clips), "" if len(clips) == 1 else "s", level))
    tool = os.path.join(os.environ.get("BUILD", "build"), "draw_shapes")
    cmd = [tool, "--events", str(first + clips[0] - 1), str(first + clips[-1] - 1), "7", "46", "32"]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        sys.exit("shapes_events: %s: cannot run it: %s (make builds it; BUILD names the build folder)"
                 % (tool, e.strerror))
    if res.returncode != 0:
        sys.exit("shapes_events: %s failed (status %d): %s" % (tool, res.returncode,
                                                                (res.stderr.strip().splitlines() or ["no message"])[-1]))
    events = {}
    for line in res.stdout.splitlines():
        f = line.split()
        if len(f) == 5 and f[1] == "bounces" and f[3] == "meetings":
            events[int(f[0]) - first + 1] = (int(f[2]), int(f[4]))
    missing = [k for k in clips if k not in events]
    if missing:
        sys.exit("shapes_events: %s gave no events of clip shapes:%d" % (tool, first + missing[0] - 1))
    rows = [(events[k][0], events[k][1], gain[k]) for k in clips]
    b, m, d = (np.array(c, dtype=float) for c in zip(*rows))

    def group(name, mask):
        x = d[mask]
        if not len(x):
            print("%-28s %3d clips" % (name, 0))
            return
        se = x.std(ddof=1) / np.sqrt(len(x)) if len(x) > 1 else float("nan")
        print("%-28s %3d clips  %+.2f dB (std err %.2f)" % (name, len(x), x.mean(), se))

    print("%s: %d clips at noise-aug level %s (the file's levels: %s), frames 7-46 (the next 40 from 7 given), "
          "PSNR chain - copy" % (tsv, len(d), level, ", ".join(names)))
    group("all", b >= 0)
    for lo, hi in ((0, 2), (3, 4), (5, 99)):
        group("bounces %d-%d" % (lo, hi) if hi < 99 else "bounces %d or more" % lo, (b >= lo) & (b <= hi))
    group("no frame with shapes meeting", m == 0)
    group("shapes meeting in some frame", m > 0)
    X = np.c_[np.ones_like(b), b, m / 40]
    try:
        coef = np.linalg.lstsq(X, d, rcond=None)[0]
        r = d - X @ coef
        cov = (r @ r) / (len(d) - X.shape[1]) * np.linalg.inv(X.T @ X)
        se = np.sqrt(np.diag(cov))
        print("fit: %+.2f (%.2f) dB %+.3f (%.3f) per bounce %+.2f (%.2f) for meetings in all 40 frames"
              % (coef[0], se[0], coef[1], se[1], coef[2], se[2]))
    except np.linalg.LinAlgError:
        print("fit: none (the clips' bounces and meetings do not vary apart: the fit has no single answer)")
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        print("(bounces and meetings correlate: %.2f)" % np.corrcoef(b, m)[0, 1])


if __name__ == "__main__":
    main()
