#!/usr/bin/python3
"""What the moving shapes' score over the next 40 frames owes to their bounces and meetings.

For each clip of an eval TSV scored from 7 given frames (make eval's shapes48_given7: shapes:1000001
to shapes:1000048), build/draw_shapes --events counts what no motion measured from frames 0-6 can
know, in frames 7-46: bounces off the frame's edges and frames where two shapes' bounding circles
overlap. Prints the chain's gain over repeating frame 6 (each clip's `clip` row: PSNR chain - copy)
by the clips' bounces and meetings, and its least-squares fit on them with standard errors.

usage: tools/shapes_events.py [TSV] [FIRST_CLIP]
       (default out/eval-unseen/shapes48_given7.tsv, clips numbered from shapes:1000001)
"""
import os
import subprocess
import sys

try:
    import numpy as np
except ImportError as e:  # one line naming the module and the Python, not a traceback
    sys.exit("%s: %s cannot import %s (apt-get install python3-%s, or run it with a Python that has it)"
             % (os.path.basename(sys.argv[0]), sys.executable, e.name, (e.name or "?").split(".")[0]))


def main():
    args = sys.argv[1:]
    if args in (["--help"], ["-h"]):
        print(__doc__.strip())
        return
    if len(args) > 2 or any(a.startswith("-") for a in args) or (len(args) == 2 and not args[1].isdigit()):
        sys.exit("usage: tools/shapes_events.py [TSV] [FIRST_CLIP]")
    tsv = sys.argv[1] if len(sys.argv) > 1 else "out/eval-unseen/shapes48_given7.tsv"
    first = int(sys.argv[2]) if len(sys.argv) > 2 else 1000001
    gain = {}
    try:
        rows = open(tsv).read().splitlines()
    except OSError as e:
        sys.exit("%s: %s (make eval writes it; or name an eval TSV)" % (tsv, e.strerror))
    for line in rows:  # the settings' '#' lines before the header are no clip row
        f = line.split("\t")
        if f[0] == "clip":
            gain[int(f[2])] = float(f[3]) - float(f[4])
    if not gain:
        sys.exit("%s: no clip rows (an eval TSV of framechain eval --tsv)" % tsv)
    n = max(gain)
    tool = os.path.join(os.environ.get("BUILD", "build"), "draw_shapes")
    out = subprocess.run([tool, "--events", str(first), str(first + n - 1), "7", "46", "32"], check=True,
                         capture_output=True, text=True).stdout.split("\n")
    rows = []
    for k, line in enumerate(l for l in out if l):
        f = line.split()
        rows.append((int(f[2]), int(f[4]), gain[k + 1]))
    b, m, d = (np.array(c, dtype=float) for c in zip(*rows))

    def group(name, mask):
        x = d[mask]
        se = x.std(ddof=1) / np.sqrt(len(x)) if len(x) > 1 else float("nan")
        print("%-28s %3d clips  %+.2f dB (std err %.2f)" % (name, len(x), x.mean(), se))

    print("%s: %d clips, frames 7-46 (the next 40 from 7 given), PSNR chain - copy" % (tsv, len(d)))
    group("all", b >= 0)
    for lo, hi in ((0, 2), (3, 4), (5, 99)):
        group("bounces %d-%d" % (lo, hi) if hi < 99 else "bounces %d or more" % lo, (b >= lo) & (b <= hi))
    group("no frame with shapes meeting", m == 0)
    group("shapes meeting in some frame", m > 0)
    X = np.c_[np.ones_like(b), b, m / 40]
    coef = np.linalg.lstsq(X, d, rcond=None)[0]
    r = d - X @ coef
    cov = (r @ r) / (len(d) - X.shape[1]) * np.linalg.inv(X.T @ X)
    se = np.sqrt(np.diag(cov))
    print("fit: %+.2f (%.2f) dB %+.3f (%.3f) per bounce %+.2f (%.2f) for meetings in all 40 frames"
          % (coef[0], se[0], coef[1], se[1], coef[2], se[2]))
    print("(bounces and meetings correlate: %.2f)" % np.corrcoef(b, m)[0, 1])


if __name__ == "__main__":
    main()
