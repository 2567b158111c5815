#!/usr/bin/env bash
# framechain plot: training curves of synthetic runs whose values follow known curves, and an eval TSV
# written by hand, drawn as PNGs that are decoded here (Python's zlib, no other module) and checked
# pixel by pixel against the axis mapping plot --verbose prints: each run's colour lies where its data
# say and nowhere far from it; an exponential loss is a straight line on the log axis it gets. Bad
# input gives one line naming the file (and the line), a non-zero exit, and no file. The image's size:
# 1200 x 900 by default, 480 x 360 the smallest.
set -u
. "$(dirname "$0")/../lib.sh"
PYTHON=${PYTHON:-python3}

cp "$(dirname "$0")/pngread.py" "$tmp/"
cat > "$tmp/check.py" <<'PY'
import math, struct, sys, zlib

BLUE, ORANGE, BLACK, TEAL = (31, 119, 180), (255, 127, 14), (0, 0, 0), (0, 110, 110)
LIGHT_BLUE = tuple(round(c * 0.35 + 255 * 0.65) for c in BLUE)

# ---- the synthetic data: run a (300 steps, an exponential loss), run b (200 steps, a slow one) ----
def loss_a(s): return 2 * 0.985 ** s
def loss_b(s): return 1.5 - 0.003 * s
def lr_a(s): return 3e-4 * min(1.0, s / 50)
def lr_b(s): return 1e-4
NAN_STEP = 150  # run a's line with a NaN loss and grad norm

def write_runs(a, b):
    with open(a + "/metrics.jsonl", "w") as f:
        for s in range(1, 301):
            raw = loss_a(s) * (1.15 if s % 2 else 0.87)
            loss, grad = ("nan", "-nan") if s == NAN_STEP else ("%.7g" % raw, "%.6g" % (1 + 0.5 * math.sin(s / 20)))
            f.write('{"step":%d,"loss":%s,"smooth_loss":%.7g,"lr":%.6g,"grad_norm":%s,"nonfinite_grads":0,'
                    '"data_wait_ms":%.3f,"step_ms":100.000,"ckpt_blocked_ms":0.000}\n'
                    % (s, loss, loss_a(s), lr_a(s), grad, 2 + s / 100))
    with open(b + "/metrics.jsonl", "w") as f:
        for s in range(1, 201):
            f.write('{"step":%d,"loss":%.7g,"smooth_loss":%.7g,"lr":%.6g,"grad_norm":%.6g,"nonfinite_grads":0,'
                    '"data_wait_ms":%.3f,"step_ms":100.000,"ckpt_blocked_ms":0.000}\n'
                    % (s, loss_b(s), loss_b(s), lr_b(s), 0.8, 1.0))

# ---- the eval TSV: frames 1..60, levels 0 and 0.1, holding frame 0 below both ----
def psnr(level, f): return 32 - 0.1 * f if level == 0 else 27 - 0.05 * f
def hold0(f): return 24 - 0.15 * f
def motion(level, f): return 2 + 0.02 * f + level * 10
MOTION_REAL = 4.5

def write_tsv(path):
    with open(path, "w") as out:
        out.write("section\tnoise_aug\tframe\tpsnr_chain\tpsnr_copy\tssim_chain\tssim_copy\tmean\tcontrast\tsharpness\t"
                  "real_mean\treal_contrast\treal_sharpness\tpsnr_hold0\tssim_hold0\tmotion_chain\tmotion_real\n")
        for level in (0, 0.1):
            for f in range(1, 61):
                out.write("quality\t%g\t%d\t%.4f\t%.4f\t%.6f\t%.6f\tnan\tnan\tnan\tnan\tnan\tnan\t%.4f\t%.6f\t%.4f\t%.4f\n"
                          % (level, f, psnr(level, f), hold0(f), 0.9 - 0.002 * f, 0.7, hold0(f), 0.7,
                             motion(level, f), MOTION_REAL))
        for level in (0, 0.1):
            for f in range(0, 20):
                out.write("drift\t%g\t%d\tnan\tnan\tnan\tnan\t1.0\t0.9\t0.8\t1.0\t1.0\t1.0\tnan\tnan\tnan\tnan\n" % (level, f))

# ---- a PNG, decoded (tests/report/pngread.py, copied beside this script) ----
from pngread import load_png

def colour(rows, x, y): return tuple(rows[y][3 * x:3 * x + 3])

def panels(text):
    out = {}
    for line in text.splitlines():
        if line.startswith("panel "):
            name, rest = line[6:].split(": ", 1)
            f = rest.split()
            out[name] = dict(box=[int(v) for v in f[1:5]], x=(float(f[6]), float(f[7])), y=(float(f[9]), float(f[10])),
                             log=f[11] == "log")
    return out

def to_px(p, x, y):
    x0, y0, x1, y1 = p["box"]
    t = (lambda v: math.log10(v)) if p["log"] else (lambda v: v)
    return (x0 + (x - p["x"][0]) / (p["x"][1] - p["x"][0]) * (x1 - x0),
            y1 - (t(y) - t(p["y"][0])) / (t(p["y"][1]) - t(p["y"][0])) * (y1 - y0))

def ys_of(rows, p, col, px):
    """The rows of column px inside panel p that hold exactly colour col."""
    x0, y0, x1, y1 = p["box"]
    return [y for y in range(y0 + 1, y1) if colour(rows, px, y) == col]

def follows(rows, p, col, fn, xs, tol=2, far=4):
    """At each x, col within tol pixels of the mapped (x, fn(x)) in its column or the two beside, and
    nothing of it in that column further away than far (plus the curve's own rise over 1.5 columns)."""
    bad = []
    for x in xs:
        px, py = to_px(p, x, fn(x))
        dx = (p["x"][1] - p["x"][0]) / (p["box"][2] - p["box"][0]) * 1.5
        rise = max(abs(to_px(p, x + dx, fn(x + dx))[1] - py), abs(to_px(p, x - dx, fn(x - dx))[1] - py))
        ys = [v for c in (round(px) - 1, round(px), round(px) + 1) for v in ys_of(rows, p, col, c)]
        near = [v for v in ys if abs(v - py) <= tol]
        stray = [v for v in ys_of(rows, p, col, round(px)) if abs(v - py) > far + rise]
        if not near or stray:
            bad.append("x=%g: expected y~%.1f, found %s" % (x, py, ys[:6]))
    return bad

def report(name, bad, good):
    print(("FAIL %s: %s" % (name, "; ".join(bad[:3]))) if bad else ("PASS %s: %s" % (name, good)))

def check_runs(png, verbose, w, h):
    W, H, rows = load_png(png)
    report("plot_runs_size", [] if (W, H) == (w, h) else ["%dx%d, asked %dx%d" % (W, H, w, h)], "%dx%d as asked" % (W, H))
    P = panels(open(verbose).read())
    if set(P) != {"loss", "lr", "grad_norm", "data_wait"}:
        return report("plot_runs_panels", ["panels %s" % sorted(P)], "")
    loss, lr = P["loss"], P["lr"]
    ok = loss["log"] and not P["lr"]["log"] and loss["y"][0] <= loss_a(300) and loss["y"][1] >= loss_a(0) * 0.99 \
        and loss["y"][1] < 4 and loss["x"][1] == 300
    report("plot_runs_loss_axis", [] if ok else ["loss axis %s" % loss], "log y (the loss spans a factor of %.0f), "
           "limits %.3g..%.3g around the data" % (loss_a(0) / loss_a(300), *loss["y"]))
    # The axes' ends by the rules of a line plot: steps counted from 1 start the x axis at 0; a panel
    # whose smallest value is at most a fifth of its largest starts at 0, one far from 0 does not.
    wait_lo, wait_hi = 1.0, 2 + 300 / 100
    grad_lo = min(1 + 0.5 * math.sin(s / 20) for s in range(1, 301) if s != NAN_STEP)
    ends = [name for name, ok in (("loss x", loss["x"][0] == 0), ("data_wait y", P["data_wait"]["y"][0] == 0),
                                  ("grad_norm y", 0 < P["grad_norm"]["y"][0] < grad_lo))
            if not ok]
    report("plot_runs_axis_ends", ["%s: %s" % (n, P[n.split()[0]]) for n in ends],
           "x from 0 (steps 1..300); data wait %g..%g from 0; grad norm from %.3g, not 0 (its least %.3g)"
           % (wait_lo, wait_hi, P["grad_norm"]["y"][0], grad_lo))
    steps = [s for s in range(5, 300, 15) if s != NAN_STEP]
    report("plot_runs_curve_a", follows(rows, loss, BLUE, loss_a, steps),
           "run a's smoothed loss in its colour within 2 px of the mapping at %d steps, nothing of it 4 px away" % len(steps))
    report("plot_runs_curve_b", follows(rows, loss, ORANGE, loss_b, range(5, 200, 15)),
           "run b's loss in its own colour where its data say")
    # run b ends at step 200: none of its colour to the right of it
    x_end = round(to_px(loss, 200, 1)[0])
    late = [x for x in range(x_end + 4, loss["box"][2]) if ys_of(rows, loss, ORANGE, x)]
    report("plot_runs_b_ends", ["run b's colour at x=%s" % late[:5]] if late else [],
           "run b's colour stops at its last step (x=%d)" % x_end)
    # an exponential on a log axis is a straight line: independent of the printed mapping
    pts = []
    for x in range(loss["box"][0] + 3, loss["box"][2] - 2):
        ys = ys_of(rows, loss, BLUE, x)
        if ys and max(ys) - min(ys) <= 4: pts.append((x, sum(ys) / len(ys)))
    n = len(pts)
    mx, my = sum(p[0] for p in pts) / n, sum(p[1] for p in pts) / n
    slope = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
    worst = max(abs(y - (my + slope * (x - mx))) for x, y in pts)
    report("plot_runs_log_straight", [] if n > 200 and worst <= 2 and slope > 0.2 else
           ["%d columns, worst residual %.1f px, slope %.2f" % (n, worst, slope)],
           "run a's exponential loss is a straight falling line on the log axis (%d columns, worst %.1f px)" % (n, worst))
    light = sum(1 for x in range(loss["box"][0], loss["box"][2]) for _ in ys_of(rows, loss, LIGHT_BLUE, x))
    report("plot_runs_raw_light", [] if light > 300 else ["%d light pixels" % light],
           "each step's loss drawn under it in the light colour (%d pixels)" % light)
    report("plot_runs_lr", follows(rows, lr, BLUE, lr_a, range(3, 300, 20)) +
           follows(rows, lr, ORANGE, lr_b, range(60, 200, 20)),
           "both learning rates where the linear axis maps them")

def check_eval(png, verbose, w, h):
    W, H, rows = load_png(png)
    report("plot_eval_size", [] if (W, H) == (w, h) else ["%dx%d, asked %dx%d" % (W, H, w, h)], "%dx%d as asked" % (W, H))
    P = panels(open(verbose).read())
    if "psnr" not in P or "motion" not in P:
        return report("plot_eval_panels", ["panels %s" % sorted(P)], "")
    ps, mo = P["psnr"], P["motion"]
    frames = range(2, 60, 4)
    report("plot_eval_psnr", follows(rows, ps, BLUE, lambda f: psnr(0, f), frames) +
           follows(rows, ps, ORANGE, lambda f: psnr(0.1, f), frames),
           "one PSNR curve per noise-augmentation level, each in its colour where the TSV says")
    report("plot_eval_hold0", follows(rows, ps, BLACK, hold0, frames),
           "holding frame 0 beside them (black)")
    report("plot_eval_motion", follows(rows, mo, BLUE, lambda f: motion(0, f), frames) +
           follows(rows, mo, TEAL, lambda f: MOTION_REAL, frames),
           "motion of the chain beside the real clip's (the newest columns)")

def check_levels(png, verbose):
    """Ten levels, level l flat at PSNR 10 + 2l: the tenth (0.9) has the first's colour again, so it is
    drawn dashed: blue in some columns of its row and not in others, the first's row blue throughout."""
    W, H, rows = load_png(png)
    p = panels(open(verbose).read())["psnr"]
    cols = range(round(to_px(p, 2, 0)[0]), round(to_px(p, 19, 0)[0]))
    def covered(level):
        y = round(to_px(p, 1, 10 + 2 * level)[1])
        return sum(1 for x in cols if any(colour(rows, x, v) == BLUE for v in (y - 1, y, y + 1))) / len(cols)
    solid, dashed = covered(0), covered(9)
    report("plot_eval_ten_levels", [] if solid > 0.99 and 0.3 < dashed < 0.8 else
           ["level 0 blue in %.0f%% of its row's columns, level 0.9 in %.0f%% (expected all, and dashes)"
            % (100 * solid, 100 * dashed)],
           "level 0.9 repeats level 0's colour dashed (%.0f%% of its row), level 0 solid" % (100 * dashed))

if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "write": write_runs(sys.argv[2], sys.argv[3]), write_tsv(sys.argv[4])
    elif mode == "runs": check_runs(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    elif mode == "eval": check_eval(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    elif mode == "levels": check_levels(sys.argv[2], sys.argv[3])
PY

mkdir -p "$tmp/a" "$tmp/b" "$tmp/out"
# check.py prints its own PASS/FAIL lines; a crash of it (a PNG it cannot parse, a changed --verbose
# format) would drop the checks after it without a word, so its exit status is checked too
"$PYTHON" "$tmp/check.py" write "$tmp/a" "$tmp/b" "$tmp/eval.tsv" || fail plot_check_py_write "check.py write exited $?"

# ---- the runs, overlaid ----
if "$FC" plot "$tmp/a" "$tmp/b/" --out "$tmp/out/runs.png" --width 900 --height 700 --verbose > "$tmp/runs.log" 2> "$tmp/runs.err"; then
    "$PYTHON" "$tmp/check.py" runs "$tmp/out/runs.png" "$tmp/runs.log" 900 700 || fail plot_check_py_runs "check.py runs exited $?"
    if grep -q '^plot: a: 300 steps.*1 loss values missing or not finite, left out; 1 grad_norm' "$tmp/runs.log" &&
        grep -q '^plot: b: 200 steps' "$tmp/runs.log" && [ ! -s "$tmp/runs.err" ]; then
        pass plot_runs_nan_skipped "the NaN loss and grad norm of step $((150)) left out of their curves, not fatal"
    else
        fail plot_runs_nan_skipped "$(cat "$tmp/runs.log" "$tmp/runs.err" | grep -v '^panel' | head -3)"
    fi
else
    fail plot_runs "$(tail -1 "$tmp/runs.err")"
fi

# ---- values a diverged run writes (a gradient norm of 1e300, a wait of +-1e308, a denormal): the axis
# reaches 1e100 and no further, the curve goes on off it (the panel was empty, its ticks "1e-2147483648") ----
mkdir -p "$tmp/huge/h"
sed '3s/"grad_norm":[^,]*,/"grad_norm":1e300,/;4s/"grad_norm":[^,]*,/"grad_norm":1e-320,/;5s/"data_wait_ms":[^,]*,/"data_wait_ms":1e308,/;6s/"data_wait_ms":[^,]*,/"data_wait_ms":-1e308,/' \
    "$tmp/b/metrics.jsonl" > "$tmp/huge/h/metrics.jsonl"
"$FC" plot "$tmp/huge/h" --out "$tmp/out/huge.png" --verbose > "$tmp/huge.log" 2>&1
rc=$?
panels=$(grep -E '^panel (grad_norm|data_wait):' "$tmp/huge.log" | sed 's/.* y //' | tr '\n' ';')
awk '/^panel (grad_norm|data_wait):/ { n++; lo = $(NF - 2); hi = $(NF - 1)
        if (!(lo + 0 == lo && hi + 0 == hi && lo > -1e110 && hi < 1e110 && hi > lo) || /inf|nan/) bad = 1 }
    END { exit !(n == 2 && !bad) }' "$tmp/huge.log"
expect plot_huge_values_axis_bounded $(( rc != 0 || $? != 0 )) "status $rc; grad_norm and data_wait y ranges: $panels"
# ---- lines out of step order (a file edited or concatenated): drawn as if sorted by step ----
mkdir -p "$tmp/shuffled/b"
awk 'NR % 2' "$tmp/b/metrics.jsonl" > "$tmp/shuffled/b/metrics.jsonl"
awk '!(NR % 2)' "$tmp/b/metrics.jsonl" >> "$tmp/shuffled/b/metrics.jsonl"
if "$FC" plot "$tmp/b" --out "$tmp/out/sorted.png" > /dev/null 2>&1 &&
    "$FC" plot "$tmp/shuffled/b" --out "$tmp/out/shuffled.png" > "$tmp/shuffled.log" 2>&1; then
    same=$(cmp -s "$tmp/out/sorted.png" "$tmp/out/shuffled.png" && echo 1 || echo 0)
    expect plot_runs_unsorted_lines $(( same != 1 || $(grep -c '^plot: b: 200 steps, 1 to 200' "$tmp/shuffled.log") != 1 )) \
        "odd steps then even ones: the same PNG as in order ($same), $(head -1 "$tmp/shuffled.log")"
else
    fail plot_runs_unsorted_lines "$(tail -1 "$tmp/shuffled.log")"
fi

# ---- the eval TSV ----
if "$FC" plot --eval "$tmp/eval.tsv" --out "$tmp/out/eval.png" --width 1000 --height 640 --verbose > "$tmp/eval.log" 2>&1; then
    "$PYTHON" "$tmp/check.py" eval "$tmp/out/eval.png" "$tmp/eval.log" 1000 640 || fail plot_check_py_eval "check.py eval exited $?"
else
    fail plot_eval "$(tail -1 "$tmp/eval.log")"
fi

# more noise-augmentation levels than colours (eval takes up to 16): the colours come round again dashed
{ printf 'section\tnoise_aug\tframe\tpsnr_chain\n'
  for l in 0 1 2 3 4 5 6 7 8 9; do for f in $(seq 1 20); do printf 'quality\t0.%s\t%d\t%d\n' $l $f $((10 + 2 * l)); done; done
} > "$tmp/levels.tsv"
if "$FC" plot --eval "$tmp/levels.tsv" --out "$tmp/out/levels.png" --verbose > "$tmp/levels.log" 2>&1; then
    "$PYTHON" "$tmp/check.py" levels "$tmp/out/levels.png" "$tmp/levels.log" || fail plot_check_py_levels "check.py levels exited $?"
else
    fail plot_eval_ten_levels "$(tail -1 "$tmp/levels.log")"
fi

# quality rows from frame 0 (a whole number >= 0) are frames like any other
head -1 "$tmp/eval.tsv" > "$tmp/from0.tsv"
for f in 0 1 2 3; do printf 'quality\t0\t%d\t30\t25\t0.9\t0.8\tnan\tnan\tnan\tnan\tnan\tnan\t24\t0.7\t2\t3\n' $f; done >> "$tmp/from0.tsv"
"$FC" plot --eval "$tmp/from0.tsv" --out "$tmp/out/from0.png" > "$tmp/from0.log" 2>&1
rc=$?
expect plot_eval_frame_zero $(( rc != 0 || $(grep -c 'frames 0 to 3, 1 noise-augmentation level$' "$tmp/from0.log") != 1 )) \
    "status $rc: $(grep -m1 frames "$tmp/from0.log" || tail -1 "$tmp/from0.log")"

# ---- the settings eval writes as '#' lines before the header: passed over (the same figure as without
# them; a line's number still counts them), a file of them alone is empty ----
mkdir -p "$tmp/settings"
{ printf '# framechain 0.1.0 eval: the settings of these scores\n# starter: runs/s (step 4)\n# seed: 1\n'
  cat "$tmp/eval.tsv"; } > "$tmp/settings/eval.tsv"
"$FC" plot --eval "$tmp/settings/eval.tsv" --out "$tmp/out/settings.png" --width 1000 --height 640 > "$tmp/settings.log" 2>&1
rc=$?
awk -F'\t' -v OFS='\t' 'NR == 7 { $4 = "abc" } NR <= 9' "$tmp/settings/eval.tsv" > "$tmp/settings/badval.tsv"
"$FC" plot --eval "$tmp/settings/badval.tsv" --out "$tmp/out/bad.png" > "$tmp/settings_bad.log" 2>&1
head -3 "$tmp/settings/eval.tsv" > "$tmp/settings/only.tsv"
"$FC" plot --eval "$tmp/settings/only.tsv" --out "$tmp/out/bad.png" > "$tmp/settings_only.log" 2>&1
expect plot_eval_settings_lines $(( rc != 0 || $(cmp -s "$tmp/out/eval.png" "$tmp/out/settings.png"; echo $?) != 0 ||
    $(grep -c "badval.tsv: line 7 does not parse: column 'psnr_chain'" "$tmp/settings_bad.log") != 1 ||
    $(grep -c "only.tsv: empty: no header after its '#' lines" "$tmp/settings_only.log") != 1 )) \
    "status $rc, $(cmp -s "$tmp/out/eval.png" "$tmp/out/settings.png" && echo "the same PNG" || echo "another PNG"); $(tail -1 "$tmp/settings_bad.log"); $(tail -1 "$tmp/settings_only.log")"

# ---- an --out that is a symbolic link, or a FIFO: refused even with --overwrite, left as it was
# (a rename onto its name would have replaced the link, or the FIFO, by a file) ----
ln -s "$tmp/out/target.png" "$tmp/out/link.png" && printf 'keep' > "$tmp/out/target.png" && mkfifo "$tmp/out/fifo.png"
ln -s "$tmp/out/nowhere.png" "$tmp/out/dangling.png"
for case in "link.png: is a symbolic link to .*/target.png; a file is written only under its own name" \
            "dangling.png: is a symbolic link to $tmp/out/nowhere.png, which does not exist" \
            "fifo.png: exists and is not a file (a device, FIFO or socket)"; do
    name=${case%%:*}
    "$FC" plot "$tmp/b" --out "$tmp/out/$name" --overwrite > /dev/null 2> "$tmp/err"
    rc=$?
    [ $rc = 1 ] && [ "$(wc -l < "$tmp/err")" = 1 ] && grep -q -- "--out $tmp/out/${case}" "$tmp/err" &&
        [ -L "$tmp/out/link.png" ] && [ -p "$tmp/out/fifo.png" ] && [ "$(cat "$tmp/out/target.png")" = keep ]
    expect "plot_out_not_a_file_${name%.png}" $? "status $rc: $(head -1 "$tmp/err")"
done
[ ! -e "$tmp/out/nowhere.png" ] && [ -L "$tmp/out/dangling.png" ]
expect plot_out_dangling_link_kept $? "the link left as it was, nothing written where it points"
rm -f "$tmp/out/link.png" "$tmp/out/target.png" "$tmp/out/fifo.png" "$tmp/out/dangling.png"
# another user's file in a folder with the sticky bit (as /tmp has): only its owner may replace it, so the
# new figure could not take its name; refused before the figure, --overwrite or not. (Needs root, to make
# root's file and plot as nobody beside it; skipped where nobody cannot run the program.)
if [ "$(id -u)" = 0 ] && chmod 711 "$tmp" && mkdir -m 1777 "$tmp/sticky" && printf keep > "$tmp/sticky/x.png" &&
    setpriv --reuid=65534 --regid=65534 --clear-groups "$FC" --version > /dev/null 2>&1; then
    setpriv --reuid=65534 --regid=65534 --clear-groups "$FC" plot "$tmp/b" --out "$tmp/sticky/x.png" --overwrite \
        > "$tmp/sticky.log" 2> "$tmp/err"
    rc=$?
    expect plot_out_others_in_sticky_folder $(( rc != 1 || $(grep -c "x.png: belongs to another user (uid 0), in a folder with the sticky bit" "$tmp/err") != 1 ||
        $(grep -c . "$tmp/sticky.log") != 0 )) "status $rc: $(head -1 "$tmp/err"); the file: $(cat "$tmp/sticky/x.png")"
else
    echo "SKIP plot_out_others_in_sticky_folder: the suite does not run as root, or nobody cannot run $FC"
fi
chmod 700 "$tmp"
# a folder that takes no new file though it looks writable (/proc, even for root): refused before the figure
"$FC" plot "$tmp/b" --out /proc/framechain-plot.png > "$tmp/plot_proc.log" 2> "$tmp/err"
rc=$?
expect plot_out_folder_takes_no_file $(( rc != 1 || $(wc -l < "$tmp/err") != 1 || $(grep -c "the folder /proc" "$tmp/err") != 1 ||
    $(grep -c . "$tmp/plot_proc.log") != 0 )) "status $rc: $(head -1 "$tmp/err")"

# ---- an existing --out: refused, then replaced with --overwrite ----
before=$(cksum < "$tmp/out/runs.png")
if "$FC" plot "$tmp/b" --out "$tmp/out/runs.png" > /dev/null 2> "$tmp/err"; then
    fail plot_refuses_existing "an existing --out was replaced without --overwrite"
elif [ "$(wc -l < "$tmp/err")" = 1 ] && grep -q 'the file exists (give --overwrite' "$tmp/err" && [ "$(cksum < "$tmp/out/runs.png")" = "$before" ]; then
    pass plot_refuses_existing "$(cat "$tmp/err")"
else
    fail plot_refuses_existing "$(head -2 "$tmp/err")"
fi
if "$FC" plot "$tmp/b" --out "$tmp/out/runs.png" --overwrite > /dev/null 2>&1 && [ "$(cksum < "$tmp/out/runs.png")" != "$before" ]; then
    pass plot_overwrite "--overwrite replaced the file"
else
    fail plot_overwrite "the file was not replaced"
fi
# --overwrite keeps the replaced file's permissions (a chmod 600 not widened to the umask's)
chmod 600 "$tmp/out/runs.png"
"$FC" plot "$tmp/b" --out "$tmp/out/runs.png" --overwrite > /dev/null 2>&1 && [ "$(stat -c %a "$tmp/out/runs.png")" = 600 ]
expect plot_overwrite_keeps_mode $? "mode after --overwrite: $(stat -c %a "$tmp/out/runs.png") (600 before)"
# a file that appears at --out while the plot is drawn (another plot, a user's file) is not replaced
# without --overwrite: status 1, one line, the file as it came, no temporary file left
appears_meanwhile "$tmp/race" p.png env FRAMECHAIN_TEST_PNG_WRITE_DELAY_MS=2000 "$FC" plot "$tmp/b" --out "$tmp/race/p.png"
expect plot_never_over_a_file_that_appeared $? "$appeared"
# --out naming the table --eval reads, by its name or through a link: refused, --overwrite or not
mkdir -p "$tmp/same" && cp "$tmp/eval.tsv" "$tmp/same/t.png" && ln -s t.png "$tmp/same/link.png"
before=$(cksum < "$tmp/same/t.png")
"$FC" plot --eval "$tmp/same/t.png" --out "$tmp/same/t.png" --overwrite > /dev/null 2> "$tmp/same1.err"
rc1=$?
"$FC" plot --eval "$tmp/same/link.png" --out "$tmp/same/t.png" --overwrite > /dev/null 2> "$tmp/same2.err"
rc2=$?
[ $rc1 = 1 ] && [ $rc2 = 1 ] && [ "$(cat "$tmp/same1.err" "$tmp/same2.err" | grep -c 'is --eval .*--overwrite never replaces what the command reads')" = 2 ] &&
    [ "$(cksum < "$tmp/same/t.png")" = "$before" ]
expect plot_never_over_its_eval_table $? "status $rc1 and $rc2: $(head -1 "$tmp/same1.err" | cut -c1-200)"
# "--" ends the options: a run folder whose name starts with '-' goes after it
mkdir -p "$tmp/dash" && cp -r "$tmp/b" "$tmp/dash/-b"
fc_abs=$(cd "$(dirname "$FC")" && pwd)/$(basename "$FC")
(cd "$tmp/dash" && exec "$fc_abs" plot --out dash.png -- -b) > "$tmp/dash.log" 2>&1
rc=$?
expect plot_dash_run_after_options_end $(( rc != 0 || $(grep -c '^plot: -b: 200 steps' "$tmp/dash.log") != 1 )) \
    "status $rc: $(head -1 "$tmp/dash.log")"
# "." from inside a run folder (and "a/.." forms) is named by the folder it names, in the legend and the lines
(cd "$tmp/shuffled/b" && exec "$fc_abs" plot . ../../a/. --out "$tmp/out/dot.png") > "$tmp/dot.log" 2>&1
rc=$?
expect plot_dot_run_named $(( rc != 0 || $(grep -c '^plot: b: 200 steps' "$tmp/dot.log") != 1 ||
    $(grep -c '^plot: a: 300 steps' "$tmp/dot.log") != 1 )) "status $rc: $(head -2 "$tmp/dot.log" | tr '\n' ' ')"
# a legal --out name of 250 bytes, where its temporary "NAME.tmp-PID" would pass NAME_MAX (255)
long=$(printf 'n%.0s' $(seq 246)).png
mkdir "$tmp/long"
"$FC" plot "$tmp/b" --out "$tmp/long/$long" > /dev/null 2> "$tmp/err"
rc=$?
expect plot_250_byte_name $(( rc != 0 || $(ls -a "$tmp/long" | grep -vc '^\.\.\?$') != 1 )) \
    "status $rc: $(head -1 "$tmp/err" | cut -c1-60); $(ls "$tmp/long" 2> /dev/null | wc -l) file written, no temporary left"
rm -rf "$tmp/long"

# ---- bad input: one line naming the file (and line), a non-zero exit, nothing left under --out ----
# refused NAME PATTERN ARGS...: plot ARGS --out $tmp/out/bad.png fails so
refused() {
    local name=$1 pattern=$2
    shift 2
    "$FC" plot "$@" --out "$tmp/out/bad.png" > "$tmp/out.log" 2> "$tmp/err"
    local rc=$?
    if [ $rc = 0 ]; then fail "plot_refuses_$name" "exit status 0"
    elif [ "$(wc -l < "$tmp/err")" != 1 ]; then fail "plot_refuses_$name" "$(wc -l < "$tmp/err") lines on stderr: $(head -3 "$tmp/err")"
    elif ! grep -qF -- "$pattern" "$tmp/err"; then fail "plot_refuses_$name" "no '$pattern' in: $(cat "$tmp/err")"
    elif ls -a "$tmp/out" | grep -q 'bad'; then fail "plot_refuses_$name" "left behind: $(ls -a "$tmp/out" | grep bad)"
    else pass "plot_refuses_$name" "status $rc: $(cat "$tmp/err")"
    fi
}
mkdir -p "$tmp/none" "$tmp/empty" "$tmp/broken" "$tmp/dir.tsv"
: > "$tmp/empty/metrics.jsonl"
head -4 "$tmp/a/metrics.jsonl" > "$tmp/broken/metrics.jsonl"
echo '{"step":5,"loss":}' >> "$tmp/broken/metrics.jsonl"
head -3 "$tmp/a/metrics.jsonl" >> "$tmp/broken/metrics.jsonl"
refused missing_metrics "$tmp/none/metrics.jsonl: cannot open" "$tmp/a" "$tmp/none"
refused missing_run_folder "$tmp/gone: no such run folder" "$tmp/a" "$tmp/gone"
refused file_as_run_folder "$tmp/a/metrics.jsonl: not a run folder" "$tmp/a/metrics.jsonl"
refused empty_metrics "$tmp/empty/metrics.jsonl: empty" "$tmp/empty"
refused bad_metrics_line "$tmp/broken/metrics.jsonl: line 5 does not parse" "$tmp/broken"
# a chain that made no finite score (a diverged model): its baselines drawn, and said (the panel was
# empty, on an axis of 0 to 1 dB)
mkdir -p "$tmp/nanchain"
awk -F'\t' -v OFS='\t' 'NR == 1 { for (i = 1; i <= NF; i++) if ($i ~ /^(psnr|ssim|motion)_chain$/) c[i] = 1; print; next }
    { for (i in c) $i = "nan"; print }' "$tmp/eval.tsv" > "$tmp/nanchain/eval.tsv"
"$FC" plot --eval "$tmp/nanchain/eval.tsv" --out "$tmp/out/nanchain.png" --verbose > "$tmp/nanchain.log" 2>&1
rc=$?
expect plot_eval_chain_all_nan_baselines $(( rc != 0 || $(grep -c "none of the chain's scores is finite" "$tmp/nanchain.log") != 1 ||
    $(awk '/^panel psnr:/ { exit !($(NF - 2) > 1) }' "$tmp/nanchain.log"; echo $?) != 0 )) \
    "status $rc: $(grep -E 'none of|^panel' "$tmp/nanchain.log" | tr '\n' '|')"
# a step past what a run can have is named so (it was "not a whole number")
mkdir -p "$tmp/bigstep"
{ head -4 "$tmp/a/metrics.jsonl"; echo '{"step":2147483648,"loss":1}'; head -3 "$tmp/a/metrics.jsonl"; } > "$tmp/bigstep/metrics.jsonl"
refused step_past_int "$tmp/bigstep/metrics.jsonl: line 5 does not parse: \"step\" 2147483648 is past the most a run has" \
    "$tmp/bigstep"
# a bad last line that ends in a newline is finished, not a run still writing: refused as well
mkdir -p "$tmp/badlast"
head -4 "$tmp/a/metrics.jsonl" > "$tmp/badlast/metrics.jsonl"
echo '{"step":5,"loss":}' >> "$tmp/badlast/metrics.jsonl"
refused bad_last_line "$tmp/badlast/metrics.jsonl: line 5 does not parse" "$tmp/badlast"
# a NUL byte after a whole object (a power cut's zero-filled block) is no step's record, as train reads it
mkdir -p "$tmp/nul"
head -4 "$tmp/a/metrics.jsonl" > "$tmp/nul/metrics.jsonl"
printf '{"step":5,"loss":1}\0\0\n' >> "$tmp/nul/metrics.jsonl"
head -3 "$tmp/a/metrics.jsonl" >> "$tmp/nul/metrics.jsonl"
refused nul_in_metrics_line "$tmp/nul/metrics.jsonl: line 5 does not parse: a NUL byte" "$tmp/nul"
refused missing_tsv "$tmp/nope.tsv: cannot open" --eval "$tmp/nope.tsv"
refused unreadable_tsv "$tmp/dir.tsv: not a regular file (a folder)" --eval "$tmp/dir.tsv"
awk -F'\t' -v OFS='\t' 'NR == 4 { $4 = "abc" } NR <= 6' "$tmp/eval.tsv" > "$tmp/badval.tsv"
refused bad_tsv_value "$tmp/badval.tsv: line 4 does not parse: column 'psnr_chain'" --eval "$tmp/badval.tsv"
{ head -5 "$tmp/eval.tsv"; printf 'quality\t0\t5\t30\n'; } > "$tmp/short.tsv"
refused short_tsv_line "$tmp/short.tsv: line 6 does not parse" --eval "$tmp/short.tsv"
refused not_a_tsv "$tmp/a/metrics.jsonl: line 1: no column 'section'" --eval "$tmp/a/metrics.jsonl"
# two tables in one file (cat a.tsv b.tsv): each curve drew a line from its last frame back to its
# first; refused naming the lines that hold one frame twice. Rows out of order are sorted: the figure of
# the table reversed is the table's
cat "$tmp/eval.tsv" "$tmp/eval.tsv" > "$tmp/twice.tsv"
refused two_tables_in_one_tsv "$tmp/twice.tsv: lines 2 and $(( $(wc -l < "$tmp/eval.tsv") + 2 )) both hold frame 1 at noise_aug 0: two tables in one file" \
    --eval "$tmp/twice.tsv"
mkdir -p "$tmp/reversed"  # (the figure's title names the file)
{ head -1 "$tmp/eval.tsv"; tail -n +2 "$tmp/eval.tsv" | tac; } > "$tmp/reversed/eval.tsv"
"$FC" plot --eval "$tmp/reversed/eval.tsv" --out "$tmp/out/reversed.png" --width 1000 --height 640 > /dev/null 2>&1
expect plot_eval_rows_sorted $(cmp -s "$tmp/out/eval.png" "$tmp/out/reversed.png"; echo $?) \
    "the rows in reverse order: $(cmp -s "$tmp/out/eval.png" "$tmp/out/reversed.png" && echo "the same PNG" || echo "another PNG")"
refused runs_and_eval "give runs or --eval FILE.tsv, not both" "$tmp/a" --eval "$tmp/eval.tsv"
"$FC" plot "$tmp/a" --out "$tmp/out/bad.jpg" > /dev/null 2> "$tmp/err"
rc=$?
if [ $rc = 2 ] && [ "$(wc -l < "$tmp/err")" = 1 ] && grep -q 'ending in .png' "$tmp/err" && [ ! -e "$tmp/out/bad.jpg" ]; then
    pass plot_refuses_not_png "status 2: $(cat "$tmp/err")"
else
    fail plot_refuses_not_png "status $rc: $(head -2 "$tmp/err")"
fi
if ls -a "$tmp/out" | grep -q tmp; then fail plot_no_temporary_files "$(ls -a "$tmp/out")"; else pass plot_no_temporary_files "none left in the output folder"; fi

png_size() { "$PYTHON" -c 'import struct, sys; print("%dx%d" % struct.unpack(">II", open(sys.argv[1], "rb").read()[16:24]))' "$1"; }

# ---- a stop (SIGTERM) while the PNG is written: it is finished and renamed, no temporary file left
# beside --out, the exit status 128 + 15 (the write held 3 s by a test hook, so that the kill lands in it) ----
mkdir -p "$tmp/stop"
FRAMECHAIN_TEST_PNG_WRITE_DELAY_MS=3000 "$FC" plot "$tmp/b" --out "$tmp/stop/b.png" > "$tmp/stop.log" 2>&1 &
pid=$!
for _ in $(seq 500); do ls "$tmp/stop" | grep -q tmp && break; sleep 0.02; done
kill -TERM $pid
wait $pid
rc=$?
size=$(png_size "$tmp/stop/b.png" 2> /dev/null || echo "no PNG")
expect plot_stopped_mid_write $(( rc != 143 || $(ls -a "$tmp/stop" | grep -vc '^\.\.\?$') != 1 ||
    $([ "$size" = 1200x900 ]; echo $?) )) "status $rc; left in the folder: $(ls "$tmp/stop" | tr '\n' ' ')($size)"
# the same stop once the PNG is in place, before its line (held there by a test hook): the line said,
# the status the stop's (the signal's default action ended plot there without a word)
FRAMECHAIN_TEST_FINISHED_DELAY_MS=5000 "$FC" plot "$tmp/b" --out "$tmp/stop/late.png" > "$tmp/late.log" 2>&1 &
pid=$!
wait_until 60 $pid grep -q '^test hook: the output in place held' "$tmp/late.log"
kill -TERM $pid
wait $pid
rc=$?
[ $rc = 143 ] && [ "$(png_size "$tmp/stop/late.png" 2> /dev/null)" = 1200x900 ] &&
    grep -q "^plot: wrote $tmp/stop/late.png (1200 x 900)$" "$tmp/late.log"
expect plot_stopped_after_rename_says_wrote $? "status $rc: $(tail -1 "$tmp/late.log")"

# ---- a run still writing: its unfinished last line (no newline yet) is left out with a warning ----
mkdir -p "$tmp/live"
head -20 "$tmp/a/metrics.jsonl" > "$tmp/live/metrics.jsonl"
printf '{"step":21,"loss":0.5' >> "$tmp/live/metrics.jsonl"
if "$FC" plot "$tmp/live" --out "$tmp/out/live.png" > "$tmp/out.log" 2> "$tmp/err" && grep -q 'line 21 is unfinished' "$tmp/err" &&
    grep -q '^plot: live: 20 steps' "$tmp/out.log"; then
    pass plot_unfinished_last_line "20 steps drawn; $(cat "$tmp/err")"
else
    fail plot_unfinished_last_line "$(cat "$tmp/out.log" "$tmp/err" | head -3)"
fi

# ---- the image's size: 1200 x 900 by default; the smallest allowed, 480 x 360, drawn; 479 refused ----
"$FC" plot "$tmp/b" --out "$tmp/out/default.png" > /dev/null 2>&1
rc1=$?
"$FC" plot "$tmp/b" --out "$tmp/out/least.png" --width 480 --height 360 > /dev/null 2>&1
rc2=$?
"$FC" plot "$tmp/b" --out "$tmp/out/narrow.png" --width 479 > /dev/null 2>&1
rc3=$?
sizes="$(png_size "$tmp/out/default.png" 2> /dev/null) $(png_size "$tmp/out/least.png" 2> /dev/null)"
[ $rc1 = 0 ] && [ $rc2 = 0 ] && [ $rc3 = 2 ] && [ "$sizes" = "1200x900 480x360" ]
expect plot_image_size $? \
    "status $rc1, $rc2: the PNGs' headers say $sizes (expected 1200x900 by default, 480x360 asked); --width 479: status $rc3 (expected 2)"

# ---- the command line ----
if "$FC" plot --help | grep -q '^usage: framechain plot RUN'; then pass plot_help "usage line"; else fail plot_help "no usage line"; fi
"$FC" plot --out "$tmp/out/x.png" > /dev/null 2> "$tmp/err"
rc=$?
if [ $rc = 2 ] && grep -q 'nothing to plot' "$tmp/err"; then pass plot_no_input "status 2: $(cat "$tmp/err")"; else fail plot_no_input "status $rc: $(cat "$tmp/err")"; fi
