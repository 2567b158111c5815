#!/usr/bin/env bash
# framechain eval: the three tiny roles trained for a few steps, a small held-out dataset prepared from
# Megamind.avi, then eval over 2 clips at two noise-augmentation levels with a drift run: the tables,
# the TSV's rows and the ranges of its numbers, the copy baseline the same at every level, the same
# numbers again for the same seed; a dataset of another frame size is refused in one line. (The models
# are barely trained, so only the plumbing and the ranges are checked, not that the chain is good.)
set -u
. "$(dirname "$0")/../lib.sh"
VIDEO=$SAMPLES/Megamind.avi

if [ ! -f "$VIDEO" ]; then
    fail eval_inputs "$VIDEO missing (apt-get install opencv-doc)"
    exit 1
fi
train_roles eval 4 1
for size in 32 48; do
    if ! "$FC" --threads 2 prepare --input "$VIDEO" --out "$tmp/held$size" --size $size --clip-frames 24 \
        > "$tmp/prep.log" 2>&1; then
        fail eval_prepare_$size "$(tail -1 "$tmp/prep.log")"
        exit 1
    fi
done

# 2 clips x 24 frames and a drift run of 40 frames, at noise-aug 0 and 0.1 (the default levels)
ARGS=(--data "$tmp/held32" --clips 2 --frames 24 --steps 2)
"$FC" --threads 2 eval "${RUNS[@]}" "${ARGS[@]}" --long 40 --tsv "$tmp/eval.tsv" > "$tmp/out" 2> "$tmp/err"
rc=$?
if [ $rc -ne 0 ]; then
    fail eval_runs "status $rc: $(tail -1 "$tmp/err")"
    exit 1
fi
pass eval_runs "exit 0; $(grep -c '^eval: clip' "$tmp/err") clip runs and $(grep -c '^eval: drift' "$tmp/err") drift runs on stderr"

# the tables: a header, the ranges 1-6, 7-12, 13-23 and all at both levels; drift rows at both levels
if grep -q 'PSNR chain' "$tmp/out" && [ "$(grep -cE '^(0|0\.1) +(1-6|7-12|13-23|all) ' "$tmp/out")" = 8 ]; then
    pass eval_quality_table "ranges 1-6, 7-12, 13-23 and all at both levels"
else
    fail eval_quality_table "$(cat "$tmp/out")"
fi
# Megamind.avi opens on one black frame: the drift run starts from clip 2, and says so
rows=$(grep -cE '^(0|0\.1) +(0|5|10|15|20|25|30|35|39) ' "$tmp/out")
na=$(grep -cE '^(0|0\.1) +(25|30|35|39) .* n/a' "$tmp/out")
if grep -q 'real sharpness' "$tmp/out" && grep -q "from clip 2's first frame" "$tmp/out" && [ "$rows" = 18 ] && [ "$na" = 8 ]; then
    pass eval_drift_table "from clip 2 (clip 1 opens on black); frames 0, 5, ..., 35, 39 at both levels; n/a past 23"
else
    fail eval_drift_table "$(cat "$tmp/out")"
fi

# the TSV: a header, 2 levels x 23 quality rows, 2 levels x 40 drift rows, 2 levels x 2 clip rows; no
# temporary file left
rows=$(grep -vc '^#' "$tmp/eval.tsv")
q=$(grep -c '^quality' "$tmp/eval.tsv")
d=$(grep -c '^drift' "$tmp/eval.tsv")
c=$(grep -c '^clip' "$tmp/eval.tsv")
if [ "$rows" = 131 ] && [ "$q" = 46 ] && [ "$d" = 80 ] && [ "$c" = 4 ] && [ ! -e "$tmp/eval.tsv.tmp" ]; then
    pass eval_tsv_rows "1 header + 46 quality + 80 drift + 4 clip rows"
else
    fail eval_tsv_rows "$rows lines, $q quality, $d drift, $c clip rows"
fi
# the settings the scores were made with: '#' lines before the header, the models' defaults settled
backend=$(sed -n 's/.*, seed 1, on \([^;]*\);.*/\1/p' "$tmp/out")
cat > "$tmp/settings.want" <<EOF
# $("$FC" --version | head -1) eval: the settings of these scores
# starter: $tmp/starter (step 4)
# extrapolate: $tmp/extrapolate (step 4)
# interpolate: $tmp/interpolate (step 4)
# vae: none
# data: $tmp/held32
# clips: 2
# frames: 24
# given: 1
# long: 40
# noise-aug: 0,0.1
# steps: 2
# temperature: 1
# guidance: 1
# sharpness-guard: 0.05
# colour-guard: 0
# colour-ramp: 96
# seed: 1
# backend: ${backend:-?}
EOF
n=$(wc -l < "$tmp/settings.want")
after=$(sed -n "$((n + 1))p" "$tmp/eval.tsv")
diff "$tmp/settings.want" <(head -$n "$tmp/eval.tsv") > "$tmp/settings.diff"
[ ! -s "$tmp/settings.diff" ] && [ "$(printf '%s' "$after" | cut -f1-3)" = "$(printf 'section\tnoise_aug\tframe')" ]
expect eval_tsv_settings $? "$n settings lines, then the header (line $((n + 1)): $(printf '%s' "$after" | cut -f1-3 | tr '\t' ' ')); $(grep -c '^[<>]' "$tmp/settings.diff") lines differ: $(grep -m3 '^[<>]' "$tmp/settings.diff" | tr '\n' ' ')"
# the readers of the TSV pass over them: plot draws it
"$FC" plot --eval "$tmp/eval.tsv" --out "$tmp/eval.png" > "$tmp/plot.log" 2>&1
rc=$?
expect eval_tsv_plotted $(( rc != 0 || $(grep -c 'eval.tsv: frames 1 to 23, 2 noise-augmentation levels$' "$tmp/plot.log") != 1 )) \
    "status $rc: $(tail -1 "$tmp/plot.log")"

# per clip: each clip's chain - copy over the frames made (frames 1-23 from one given frame); their mean
# is the means' difference (the TSV's rows, to their 4 decimals), and the table prints it, per level
bad=""
for level in 0 0.1; do
    by_clip=$(awk -F'\t' -v l=$level '$1 == "clip" && $2 == l { s += $4 - $5; n++ } END { printf "%.4f", s / n }' "$tmp/eval.tsv")
    by_frame=$(awk -F'\t' -v l=$level '$1 == "quality" && $2 == l { s += $4 - $5; n++ } END { printf "%.4f", s / n }' "$tmp/eval.tsv")
    printed=$(awk -v l=$level '/^per clip/ { on = 1 } on && $1 == l && $2 == 2 && $7 " " $8 " " $9 ~ /^[0-2] of 2$/ { print $3 }' "$tmp/out")
    awk -v a="$by_clip" -v b="$by_frame" -v p="$printed" 'BEGIN { d = a - b; e = a - p
        exit !(p != "" && d < 0.002 && d > -0.002 && e < 0.006 && e > -0.006) }' || bad="$bad level $level: clips $by_clip, frames $by_frame, printed '$printed';"
done
if [ -z "$bad" ] && grep -q '^per clip: PSNR chain - copy over all frames made (frames 1-23)' "$tmp/out"; then
    pass eval_per_clip "the clips' mean of chain - copy is the means' difference at both levels, and printed with its spread"
else
    fail eval_per_clip "${bad:-no per-clip table}"
fi

# the spread printed under each level's table is the TSV's clip rows': the mean of chain - copy, its
# standard error (the sample standard deviation over the square root of the clip count), the min and
# max, and how many clips the chain is over the copy on (each to the table's 2 decimals)
bad=""
for level in 0 0.1; do
    want=$(awk -F'\t' -v l=$level '$1 == "clip" && $2 == l { d[++n] = $4 - $5 }
        END { for (i = 1; i <= n; i++) { s += d[i]; lo = i == 1 || d[i] < lo ? d[i] : lo; hi = i == 1 || d[i] > hi ? d[i] : hi
                                          over += d[i] > 0 }
              m = s / n; for (i = 1; i <= n; i++) v += (d[i] - m) ^ 2
              printf "%.4f %.4f %.4f %.4f %d %d", m, sqrt(v / (n - 1) / n), lo, hi, over, n }' "$tmp/eval.tsv")
    got=$(awk -v l=$level '/^per clip/ { on = 1 } on && $1 == l && $2 ~ /^[0-9]+$/ { print $3, $4, $5, $6, $7, $9; exit }' "$tmp/out")
    awk -v w="$want" -v g="$got" 'BEGIN { nw = split(w, a, " "); ng = split(g, b, " "); if (nw != 6 || ng != 6) exit 1
        for (i = 1; i <= 4; i++) if (a[i] - b[i] > 0.006 || b[i] - a[i] > 0.006) exit 1
        exit !(a[5] == b[5] && a[6] == b[6]) }' || bad="$bad level $level: from the TSV '$want', printed '$got';"
done
if [ -z "$bad" ]; then
    pass eval_per_clip_spread "mean, standard error, min, max and the clips over the copy as the TSV's clip rows give them, both levels"
else
    fail eval_per_clip_spread "$bad"
fi

# every PSNR finite and in 3..99 dB (the barely trained chain scores about 5.4 dB on these dark frames,
# so the floor sits below 5), every SSIM in [-1, 1], every drift ratio finite and positive
bad=$(awk -F'\t' '
    $1 == "quality" { for (i = 4; i <= 5; i++) if ($i !~ /^[0-9.]+$/ || $i < 3 || $i > 99) print "PSNR " $i
                      for (i = 6; i <= 7; i++) if ($i !~ /^-?[0-9.]+$/ || $i < -1 || $i > 1) print "SSIM " $i
                      for (i = 16; i <= 17; i++) if ($i !~ /^[0-9.]+$/ || $i > 255) print "motion " $i }
    $1 == "drift"   { for (i = 8; i <= ($3 < 24 ? 13 : 10); i++) if ($i !~ /^[0-9.]+$/ || $i <= 0) print "ratio " $i
                      if ($3 == 0 && ($8 != "1.000000" || $11 != "1.000000")) print "frame 0 " $8 " " $11 }' "$tmp/eval.tsv")
if [ -z "$bad" ]; then
    pass eval_ranges "PSNR in 3..99 dB, SSIM in [-1, 1], motion in 0..255, drift ratios positive, 1 at frame 0"
else
    fail eval_ranges "$(echo "$bad" | head -3 | tr '\n' ' ')"
fi

# the motion columns. The real clip's at frame f is the mean absolute change of its 8-bit values from
# frame f - 1 (tools/oracle_ceiling.py's reader of the shards, numpy), averaged over the clips. The
# chain's: models that predict v = 0 (one step at lr 0; their last layer starts at 0) sampled at
# temperature 0 make every frame mid-grey, so their chain's motion is the grey's distance from the
# given frame 0 at frame 1 (measured from the frame before it, the real one) and 0 after it.
EVAL_RUNS=("${RUNS[@]}")
mkdir -p "$tmp/still"
train_roles eval_still 1 0 "$tmp/still" lr=0
"$FC" --threads 2 eval "${RUNS[@]}" --data "$tmp/held32" --clips 2 --frames 24 --steps 2 --long 0 --noise-aug 0 \
    --temperature 0 --sharpness-guard 0 --tsv "$tmp/still.tsv" > "$tmp/still.out" 2>&1
RUNS=("${EVAL_RUNS[@]}")
# An extrapolate model that learnt its context frames noised up to 0.05: the default levels' 0.1 is
# above it, said once, naming the model; level 0 is not.
"$FC" --threads 2 train --config configs/tiny/extrapolate.conf --run "$tmp/aug05" --steps 1 --set noise_aug_max=0.05 \
    > /dev/null 2>&1
"$FC" --threads 2 eval "${RUNS[@]/$tmp\/extrapolate/$tmp/aug05}" --data "$tmp/held32" --clips 1 --frames 8 --steps 1 \
    --long 0 > "$tmp/aug05.out" 2> "$tmp/aug05.err"
rc=$?
[ $rc = 0 ] && [ "$(grep -c warning "$tmp/aug05.err")" = 1 ] &&
    grep -q "^framechain: warning: noise augmentation 0.1: the extrapolate model learnt context frames noised up to noise_aug_max = 0.05, so it sees noisier ones than any it was trained on (--noise-aug 0.05 keeps to what it saw)$" "$tmp/aug05.err"
expect eval_noise_aug_above_trained_said $? "status $rc: $(grep warning "$tmp/aug05.err" | cut -c1-200)"
if motion=$("${PYTHON:-python3}" - "$tmp/held32" "$tmp/eval.tsv" "$tmp/still.tsv" 2>&1 <<'PY'
import sys
sys.path.insert(0, "tools")
import numpy as np
from oracle_ceiling import read_clips
clips = [np.rint(c * 255) for c in read_clips(sys.argv[1], 2)]
def column(path, col):  # frame -> value of the level-0 quality rows
    rows = {}
    for line in open(path):
        c = line.rstrip("\n").split("\t")
        if c[0] == "quality" and c[1] == "0":
            rows[int(c[2])] = float(c[col])
    return rows
real, chain = column(sys.argv[2], 16), column(sys.argv[3], 15)
real_worst = max(abs(real[f] - np.mean([np.abs(c[f] - c[f - 1]).mean() for c in clips])) for f in range(1, 24))
# the grey: 127 or 128 (0 in [-1, 1] rounded to 8 bits)
first = min(abs(chain[1] - np.mean([np.abs(g - c[0]).mean() for c in clips])) for g in (127, 128))
later = max(chain[f] for f in range(2, 24))
print(f"{len(real)} {real_worst:.6f} {len(chain)} {first:.6f} {later:.6f}")
PY
); then
    set -- $motion
    if [ "$1" = 23 ] && awk -v w="$2" 'BEGIN { exit !(w < 1e-3) }'; then
        pass eval_motion_real "the real clip's motion at each of frames 1-23 as the shards give it (worst difference $2)"
    else
        fail eval_motion_real "$motion"
    fi
    if [ "$3" = 23 ] && awk -v a="$4" -v b="$5" 'BEGIN { exit !(a < 1e-3 && b == 0) }'; then
        pass eval_motion_chain "a chain of mid-grey frames: its motion at frame 1 the grey's distance from frame 0 (within $4), 0 after"
    else
        fail eval_motion_chain "$motion"
    fi
else
    fail eval_motion_real "$(echo "$motion" | tail -1)"
    fail eval_motion_chain "$(echo "$motion" | tail -1)"
fi

# the copy baseline does not depend on the level
copy0=$(awk -F'\t' '$1 == "quality" && $2 == "0" { print $3, $5, $7, $17 }' "$tmp/eval.tsv")
copy1=$(awk -F'\t' '$1 == "quality" && $2 == "0.1" { print $3, $5, $7, $17 }' "$tmp/eval.tsv")
still=$(awk -F'\t' '$1 == "quality" && $17 == 0 { n++ } END { print n + 0 }' "$tmp/eval.tsv")
if [ -n "$copy0" ] && [ "$copy0" = "$copy1" ] && [ "$still" -lt 5 ]; then
    pass eval_copy_baseline "the copy's PSNR and SSIM and the real clip's motion are identical at noise-aug 0 and 0.1; the footage still in $still of its frames"
else
    fail eval_copy_baseline "the copy's numbers differ across levels, or the footage is still in $still frames"
fi
# the real clip, where it exists, is the same under both levels' drift rows
real0=$(awk -F'\t' '$1 == "drift" && $2 == "0" { print $11, $12, $13 }' "$tmp/eval.tsv")
real1=$(awk -F'\t' '$1 == "drift" && $2 == "0.1" { print $11, $12, $13 }' "$tmp/eval.tsv")
if [ "$real0" = "$real1" ] && [ "$(echo "$real0" | grep -c nan)" = 16 ]; then
    pass eval_real_drift "the real clip's ratios at frames 0..23, nan at 24..39"
else
    fail eval_real_drift "$(echo "$real0" | grep -c nan) nan rows"
fi

# --tsv: an eval stopped part-way leaves no temporary file (it exists only while the table is
# written); one left by a writer that no longer runs (a PID past pid_max) is removed by the next eval
dead=$(( $(cat /proc/sys/kernel/pid_max) + 1 ))
: > "$tmp/cut.tsv.tmp-$dead"
"$FC" --threads 2 eval "${RUNS[@]}" "${ARGS[@]}" --long 40 --tsv "$tmp/cut.tsv" > "$tmp/cut.out" 2>&1 &
pid=$!
wait_until 60 $pid grep -q '^eval: the first' "$tmp/cut.out"
kill -TERM $pid 2> /dev/null
wait $pid
rc=$?
expect eval_stopped_leaves_no_temporary $(( rc != 143 || $(ls -a "$tmp" | grep -c 'cut.tsv') != 0 ||
    $(grep -c "^removed $tmp/cut.tsv.tmp-$dead, left by a write of $tmp/cut.tsv that was cut off" "$tmp/cut.out") != 1 )) \
    "status $rc (SIGTERM part-way)${waited:+, $waited}; left: $(ls -a "$tmp" | grep cut.tsv | tr '\n' ' ')"
# SIGINT to an eval started with SIGINT ignored (a script's background job), while it loads (a test
# hook holds its start): it was ignored, the eval ran to its end and wrote the table, status 0.
# Status 130 before the first clip, no table
int_while_starting "$tmp/int.out" "$FC" --threads 2 eval "${RUNS[@]}" "${ARGS[@]}" --long 0 --tsv "$tmp/int.tsv"
expect eval_sigint_in_background $(( rc != 130 || $(ls -a "$tmp" | grep -c 'int.tsv') != 0 ||
    $(grep -c '^framechain: stopped by SIGINT at clip 1 of [0-9]*: no table written$' "$tmp/int.out") != 1 )) \
    "status $rc: $(tail -1 "$tmp/int.out"); left: $(ls -a "$tmp" | grep int.tsv | tr '\n' ' ')"
# a legal --tsv name of 250 bytes, where its temporary "NAME.tmp-PID" would pass NAME_MAX (255):
# written through a shorter temporary name, none left
long=$(printf 'n%.0s' $(seq 246)).tsv
mkdir "$tmp/long"
"$FC" --threads 2 eval "${RUNS[@]}" --data "$tmp/held32" --clips 1 --frames 8 --steps 1 --long 0 --noise-aug 0 \
    --tsv "$tmp/long/$long" > "$tmp/long.out" 2> "$tmp/long.err"
rc=$?
# one clip has no spread: its per-clip row says n/a for the standard error, no nan anywhere in the table
row=$(awk '/^per clip/ { on = 1 } on && $1 == "0" && $2 == 1 { print $4 }' "$tmp/long.out")
expect eval_one_clip_no_nan $(( rc != 0 || $(grep -ci 'nan' "$tmp/long.out") != 0 )) \
    "status $rc; the one clip's std err: '$row'; lines with nan: $(grep -ci 'nan' "$tmp/long.out")"
[ "$row" = "n/a" ]
expect eval_one_clip_std_err_na $? "the one clip's std err: '$row'"
expect eval_250_byte_tsv_name $(( rc != 0 || $(ls -a "$tmp/long" | grep -vc '^\.\.\?$') != 1 || $(grep -c '^quality' "$tmp/long/$long" 2> /dev/null) < 1 )) \
    "status $rc: $(tail -1 "$tmp/long.err" | cut -c1-60); $(ls -a "$tmp/long" | grep -vc '^\.\.\?$') file(s) in its folder"
rm -rf "$tmp/long"

# the same seed gives the same numbers (one level, no drift run, to keep it quick)
"$FC" --threads 2 eval "${RUNS[@]}" "${ARGS[@]}" --long 0 --noise-aug 0.1 --tsv "$tmp/again.tsv" > /dev/null 2>&1
if diff <(grep '^quality.0\.1' "$tmp/eval.tsv") <(grep '^quality' "$tmp/again.tsv") > /dev/null; then
    pass eval_deterministic "the same seed: the same per-frame numbers"
else
    fail eval_deterministic "a second run with the same seed differs"
fi

# expect_refusal NAME STATUS PATTERN ARGS...: that exit status, one line on stderr with PATTERN, nothing
# on stdout
expect_refusal() {
    local name=$1 want=$2 pattern=$3
    shift 3
    "$FC" --threads 2 eval "$@" > "$tmp/out" 2> "$tmp/err"
    local rc=$?
    if [ $rc -ne "$want" ]; then fail "eval_refuses_$name" "exit status $rc, not $want: $(tail -1 "$tmp/err")"
    elif ! grep -q -- "$pattern" "$tmp/err"; then fail "eval_refuses_$name" "stderr lacks '$pattern': $(cat "$tmp/err")"
    elif [ "$(grep -vc '^framechain: warning' "$tmp/err")" -ne 1 ]; then fail "eval_refuses_$name" "$(wc -l < "$tmp/err") lines on stderr"
    elif [ -s "$tmp/out" ] || [ -e "$tmp/bad.tsv" ] || [ -e "$tmp/bad.tsv.tmp" ]; then fail "eval_refuses_$name" "output was written"
    else pass "eval_refuses_$name" "status $rc: $(grep -v '^framechain: warning' "$tmp/err")"
    fi
}
expect_refusal wrong_size 1 "frames are 48x48, but the models make 32x32" "${RUNS[@]}" --data "$tmp/held48" --tsv "$tmp/bad.tsv"
expect_refusal too_many_frames 1 "the clips of .* have only 24 frames" "${RUNS[@]}" --data "$tmp/held32" --frames 30 --tsv "$tmp/bad.tsv"
expect_refusal no_dataset 1 "no such folder" "${RUNS[@]}" --data "$tmp/nothing" --tsv "$tmp/bad.tsv"
expect_refusal bad_levels 2 "noise-aug" "${RUNS[@]}" --data "$tmp/held32" --noise-aug 0,x --tsv "$tmp/bad.tsv"
expect_refusal short_long 2 "long" "${RUNS[@]}" --data "$tmp/held32" --long 3 --tsv "$tmp/bad.tsv"
expect_refusal given_count 1 "1 (the first frame) or 7" "${RUNS[@]}" --data "$tmp/held32" --given 3 --tsv "$tmp/bad.tsv"
mkdir -p "$tmp/a_folder"
expect_refusal tsv_is_a_folder 1 "--tsv .*a_folder: is a folder" "${RUNS[@]}" --data "$tmp/held32" --tsv "$tmp/a_folder"
# a folder that takes no new file though it looks writable (/proc, even for root): said before the work
expect_refusal tsv_folder_takes_no_file 1 "--tsv /proc/framechain-eval.tsv: .* the folder /proc" "${RUNS[@]}" \
    --data "$tmp/held32" --tsv /proc/framechain-eval.tsv
expect_refusal given_all_frames 2 "not more than --given 7" "${RUNS[@]}" --data "$tmp/held32" --frames 7 --given 7 \
    --tsv "$tmp/bad.tsv"
expect_refusal given_all_clip_frames 1 "none of the 24 frames" "${RUNS[@]}" --data "$tmp/held32" --given 24 --tsv "$tmp/bad.tsv"
# a drift run no longer than the given frames would make none: refused as a bad command line (both
# values are on it), not a table of the real frames, and before the models and the data are read
expect_refusal long_within_given 2 "--long 7: the drift run would make none of its frames from --given 7" "${RUNS[@]}" \
    --data "$tmp/held32" --frames 8 --given 7 --long 7 --tsv "$tmp/bad.tsv"
expect_refusal long_within_given_first 2 "--long 7: the drift run" "${RUNS[@]}" --data "$tmp/nothing" --given 7 --long 7
expect_refusal long_default_within_given 2 "--long 181 (the default): the drift run" "${RUNS[@]}" --data "$tmp/held32" \
    --given 181
expect_refusal levels_hex 2 "noise-aug 0x0.1: expected levels" "${RUNS[@]}" --data "$tmp/held32" --noise-aug 0x0.1 --tsv "$tmp/bad.tsv"
expect_refusal levels_twice 2 "level 0.1 given twice" "${RUNS[@]}" --data "$tmp/held32" --noise-aug 0.1,0,0.1 --tsv "$tmp/bad.tsv"
expect_refusal overwrite_without_tsv 2 "overwrite: it goes with --tsv" "${RUNS[@]}" --data "$tmp/held32" --overwrite
# --tsv onto an existing file (another run's metrics.jsonl, an earlier table): refused before any work,
# the file kept; --overwrite replaces it
echo keep > "$tmp/exists.tsv"
"$FC" --threads 2 eval "${RUNS[@]}" --data "$tmp/held32" --clips 1 --frames 8 --steps 1 --long 0 --noise-aug 0 \
    --tsv "$tmp/exists.tsv" > "$tmp/exists.out" 2> "$tmp/exists.err"
rc1=$?
kept=$(cat "$tmp/exists.tsv")
"$FC" --threads 2 eval "${RUNS[@]}" --data "$tmp/held32" --clips 1 --frames 8 --steps 1 --long 0 --noise-aug 0 \
    --tsv "$tmp/exists.tsv" --overwrite > /dev/null 2> "$tmp/exists2.err"
rc2=$?
expect eval_tsv_exists_needs_overwrite $(( rc1 != 1 || rc2 != 0 || $(grep -c "exists.tsv: the file exists (give --overwrite to replace it)" "$tmp/exists.err") != 1 ||
    $(grep -c "loading\|clip 1" "$tmp/exists.err") != 0 || ${#kept} != 4 || $(grep -c '^quality' "$tmp/exists.tsv") < 1 )) \
    "status $rc1 then $rc2 with --overwrite: $(tail -1 "$tmp/exists.err" | cut -c1-100); kept '$kept' until --overwrite"
# ... and the replaced table keeps its permissions (a chmod 600 is not widened to the umask's)
chmod 600 "$tmp/exists.tsv"
"$FC" --threads 2 eval "${RUNS[@]}" --data "$tmp/held32" --clips 1 --frames 8 --steps 1 --long 0 --noise-aug 0 \
    --tsv "$tmp/exists.tsv" --overwrite > /dev/null 2>&1 && [ "$(stat -c %a "$tmp/exists.tsv")" = 600 ]
expect eval_tsv_overwrite_keeps_mode $? "mode after --overwrite: $(stat -c %a "$tmp/exists.tsv") (600 before)"
# a file that appears at --tsv while eval runs (a second eval to the same name) is not replaced without
# --overwrite: status 1, one line, the file as it came, no temporary file left (the write held 2 s by a
# test hook)
appears_meanwhile "$tmp/race" t.tsv env FRAMECHAIN_TEST_TSV_WRITE_DELAY_MS=2000 "$FC" --threads 2 eval "${RUNS[@]}" \
    --data "$tmp/held32" --clips 1 --frames 8 --steps 1 --long 0 --noise-aug 0 --tsv "$tmp/race/t.tsv"
expect eval_tsv_never_over_a_file_that_appeared $? "$appeared"
# two levels that differ past a few digits stay two in the TSV's rows (they were both written 0.1)
"$FC" --threads 2 eval "${RUNS[@]}" --data "$tmp/held32" --clips 1 --frames 8 --steps 1 --long 0 \
    --noise-aug 0.1,0.1000001 --tsv "$tmp/close.tsv" > /dev/null 2>&1
rc=$?
levels=$(awk -F'\t' '$1 == "quality" { print $2 }' "$tmp/close.tsv" 2> /dev/null | sort -u | tr '\n' ' ')
[ $rc = 0 ] && [ "$levels" = "0.1 0.1000001 " ]
expect eval_close_levels_distinct $? "status $rc; the quality rows' levels: $levels"
expect_refusal levels_alike_to_15_digits 2 "level 0.1 given twice" "${RUNS[@]}" --data "$tmp/held32" \
    --noise-aug 0.1,0.1000000000000001 --tsv "$tmp/bad.tsv"
# --overwrite never replaces a file eval reads: the dataset's (under another spelling of its folder too)
# and a run's checkpoint are refused before any work, each kept as it was
cp -r "$tmp/held32" "$tmp/held_in"
cp "$tmp/held_in/dataset.json" "$tmp/dataset.json.was"
ckpt=$(ls "$tmp/starter"/ckpt-*.safetensors | tail -1)
cp "$ckpt" "$tmp/ckpt.was"
expect_refusal tsv_is_dataset_file 1 "--tsv .*dataset.json: is a file of the dataset" "${RUNS[@]}" --data "$tmp/held_in" \
    --clips 1 --frames 8 --steps 1 --long 0 --noise-aug 0 --tsv "$tmp/./held_in/dataset.json" --overwrite
expect_refusal tsv_is_checkpoint 1 "is a file of the run --starter" "${RUNS[@]}" --data "$tmp/held_in" \
    --clips 1 --frames 8 --steps 1 --long 0 --noise-aug 0 --tsv "$ckpt" --overwrite
cmp -s "$tmp/held_in/dataset.json" "$tmp/dataset.json.was" && cmp -s "$ckpt" "$tmp/ckpt.was"
expect eval_tsv_inputs_kept $? "the dataset's dataset.json and the starter's checkpoint as they were"
# an earlier table kept in the data folder is no file of the dataset: --overwrite replaces it
printf 'an earlier table\n' > "$tmp/held_in/old.tsv"
"$FC" eval "${RUNS[@]}" --data "$tmp/held_in" --clips 1 --frames 8 --steps 1 --long 0 --noise-aug 0 \
    --tsv "$tmp/held_in/old.tsv" --overwrite > /dev/null 2> "$tmp/old.err"
rc=$?
expect eval_tsv_replaces_table_in_data_folder $(( rc != 0 || $(grep -c '^quality' "$tmp/held_in/old.tsv") < 1 )) \
    "status $rc: $(tail -1 "$tmp/old.err")"
expect_refusal guidance_without_drop 1 "trained with cond_drop = 0" "${RUNS[@]}" --data "$tmp/held32" --guidance 2 \
    --tsv "$tmp/bad.tsv"

# The drift run starts from the first scored clip whose first frame is not flat, and says how many it
# passed over for a flat one; a damaged clip, skipped, is not called flat
ffmpeg -v error -f lavfi -i color=c=gray:s=32x32:r=25:d=1 -c:v ffv1 "$tmp/flat.mkv"
"$FC" --threads 2 prepare --input "$tmp/flat.mkv" --input "$SAMPLES/vtest.avi" --out "$tmp/flat_first" --size 32 --clip-frames 24 \
    > /dev/null 2>&1
cp -r "$tmp/held32" "$tmp/damaged_first"
damage_clip "$tmp/damaged_first/shard-00000.safetensors" 0
"$FC" --threads 2 eval "${RUNS[@]}" --data "$tmp/flat_first" --clips 2 --frames 8 --steps 1 --noise-aug 0 --long 8 \
    > "$tmp/flat.out" 2> "$tmp/flat.err"
rc1=$?
"$FC" --threads 2 eval "${RUNS[@]}" --data "$tmp/damaged_first" --clips 2 --frames 8 --steps 1 --noise-aug 0 --long 8 \
    > "$tmp/dmg.out" 2> "$tmp/dmg.err"
rc2=$?
if [ $rc1 -eq 0 ] && grep -q "from clip 2's first frame" "$tmp/flat.out" &&
    grep -q "the first frame of the 1 clip scored before it is flat" "$tmp/flat.out" &&
    [ $rc2 -eq 0 ] && grep -q "from clip 2's first frame" "$tmp/dmg.out" && ! grep -q "flat" "$tmp/dmg.out" &&
    grep -q "damaged\|CRC" "$tmp/dmg.err"; then
    pass eval_drift_start_notes "a flat first clip passed over and said so; a damaged one skipped and not called flat"
else
    fail eval_drift_start_notes "status $rc1 / $rc2: $(grep -m1 '^drift' "$tmp/flat.out"; grep -m1 'flat' "$tmp/flat.out"); damaged: $(grep -m1 '^drift' "$tmp/dmg.out"; grep -m1 'flat' "$tmp/dmg.out")"
fi
# one saturated colour is flat too (its contrast over the three channels together is 120): said, and
# its sharpness, a rounding remainder of 1e-15, gives no ratio (they were 3e16)
ffmpeg -v error -f lavfi -i color=c=blue:s=32x32:r=25:d=1 -c:v ffv1 "$tmp/blue.mkv"
"$FC" --threads 2 prepare --input "$tmp/blue.mkv" --out "$tmp/blue" --size 32 --clip-frames 24 > /dev/null 2>&1
"$FC" --threads 2 eval "${RUNS[@]}" --data "$tmp/blue" --clips 1 --frames 8 --steps 1 --noise-aug 0 --long 8 \
    --tsv "$tmp/blue.tsv" > "$tmp/blue.out" 2>&1
rc=$?
huge=$(awk -F'\t' '$1 == "drift" { for (i = 4; i <= NF; i++) if ($i != "nan" && ($i > 1e6 || $i < -1e6)) n++ } END { print n + 0 }' "$tmp/blue.tsv" 2> /dev/null)
expect eval_one_colour_first_frame $(( rc != 0 || $(grep -c '^(every first frame is flat, a single colour' "$tmp/blue.out") != 1 ||
    ${huge:-1} != 0 )) "status $rc; $(grep -m1 'flat' "$tmp/blue.out"); drift values past 1e6: ${huge:-?}"

# From the first 7 real frames (the starter skipped): the rows start at frame 7, the baseline holds frame 6
"$FC" --threads 2 eval "${RUNS[@]}" "${ARGS[@]}" --given 7 --long 30 --noise-aug 0.1 --tsv "$tmp/given.tsv" \
    > "$tmp/out" 2> "$tmp/err"
rc=$?
q=$(grep -c '^quality' "$tmp/given.tsv" 2>/dev/null)
first=$(awk -F'\t' '$1 == "quality" { print $3; exit }' "$tmp/given.tsv" 2>/dev/null)
# frame 0 held is the second baseline: its columns in the table and the TSV, equal to the copy of
# the run from one frame
hold_given=$(awk -F'\t' '$1 == "quality" && $3 == 7 { print $14 }' "$tmp/given.tsv" 2>/dev/null)
copy_one=$(awk -F'\t' '$1 == "quality" && $2 == "0.1" && $3 == 7 { print $5 }' "$tmp/eval.tsv")
hold_one=$(awk -F'\t' '$1 == "quality" && $2 == "0.1" && $3 == 7 { print $14 }' "$tmp/eval.tsv")
if [ $rc -eq 0 ] && grep -q 'copy: frame 6 held' "$tmp/out" && grep -qE '^0\.1 +7-12 ' "$tmp/out" &&
    ! grep -qE '^0\.1 +1-6 ' "$tmp/out" && [ "$q" = 17 ] && [ "$first" = 7 ] && grep -q 'PSNR hold 0' "$tmp/out" &&
    [ -n "$hold_given" ] && [ "$hold_given" = "$copy_one" ] && [ "$hold_one" = "$copy_one" ]; then
    pass eval_given_window "rows from frame 7 (17 per level), frame 6 held as the baseline, frame 0 held beside it ($hold_given dB at frame 7, as the copy from one frame)"
else
    fail eval_given_window "status $rc, $q quality rows from frame $first: $(tail -1 "$tmp/err")"
fi

# Clips long enough for the goal's horizon (48 frames from 7 given): each clip's score is over the next
# 40 frames (7-46), the 'next 40' row's; their mean is that row's chain - copy (moving shapes: synthetic,
# so quick to make)
if "$FC" prepare --input shapes:7:48 --input shapes:8:48 --input shapes:9:48 --out "$tmp/shapes48" --size 32 \
    --clip-frames 48 > "$tmp/prep.log" 2>&1 &&
    "$FC" --threads 2 eval "${RUNS[@]}" --data "$tmp/shapes48" --clips 3 --steps 1 --given 7 --long 0 \
        --noise-aug 0.1 --tsv "$tmp/next40.tsv" > "$tmp/out" 2> "$tmp/err"; then
    by_clip=$(awk -F'\t' '$1 == "clip" { s += $4 - $5; n++ } END { printf "%.4f %d", s / n, n }' "$tmp/next40.tsv")
    by_frame=$(awk -F'\t' '$1 == "quality" && $3 >= 7 && $3 <= 46 { s += $4 - $5; n++ } END { printf "%.4f", s / n }' \
        "$tmp/next40.tsv")
    row=$(awk '$2 == "next" && $3 == "40" { printf "%.2f", $4 - $5 }' "$tmp/out")
    printed=$(awk '/^per clip/ { on = 1 } on && $1 == "0.1" && $2 == 3 { print $3 }' "$tmp/out")
    if grep -q '^per clip: PSNR chain - copy over the next 40 frames (frames 7-46)' "$tmp/out" &&
        awk -v a="${by_clip% *}" -v b="$by_frame" -v r="$row" -v p="$printed" -v n="${by_clip#* }" 'BEGIN {
            exit !(n == 3 && p != "" && r != "" && a - b < 0.002 && b - a < 0.002 && a - p < 0.006 && p - a < 0.006 &&
                   a - r < 0.011 && r - a < 0.011) }'; then
        pass eval_per_clip_next40 "3 clips scored over frames 7-46: their mean ${by_clip% *} dB is the next 40 row's chain - copy ($row)"
    else
        fail eval_per_clip_next40 "clips ${by_clip:-none}, frames $by_frame, next 40 row $row, printed '$printed'"
    fi
else
    fail eval_per_clip_next40 "$(tail -1 "$tmp/prep.log") $(tail -1 "$tmp/err")"
fi

# the horizon's edge: 47 frames from 7 given are the first that hold the next 40 (7-46); 46 hold all made
edge=""
for n in 47 46; do
    "$FC" --threads 2 eval "${RUNS[@]}" --data "$tmp/shapes48" --clips 1 --frames $n --steps 1 --given 7 --long 0 \
        --noise-aug 0.1 > "$tmp/edge$n.out" 2>&1
    edge="$edge$(grep -o '^per clip: PSNR chain - copy over [a-z 0-9]* (frames [0-9-]*)' "$tmp/edge$n.out" | cut -d' ' -f8-);"
done
if [ "$edge" = "the next 40 frames (frames 7-46);all frames made (frames 7-45);" ]; then
    pass eval_horizon_edge "47 frames: the next 40 (frames 7-46); 46 frames: all frames made (7-45)"
else
    fail eval_horizon_edge "$edge"
fi

# tools/oracle_ceiling.py reads the same shards on its own (numpy): its copy of frame 6 must score what
# eval's copy scored, clip by clip, and its oracles, which may pick that copy, never less
PYTHON=${PYTHON:-$(for p in /usr/bin/python3 python3; do $p -c 'import numpy' 2> /dev/null && echo $p && break; done)}
if [ -f "$tmp/next40.tsv" ] &&
    "${PYTHON:-python3}" tools/oracle_ceiling.py "$tmp/shapes48" --radius 2 --tiles 8 > "$tmp/oracle" 2> "$tmp/err"; then
    copy_eval=$(awk -F'\t' '$1 == "clip" { printf "%s ", $5 }' "$tmp/next40.tsv")
    copy_tool=$(awk -F'|' '$2 ~ /repeating the last given frame/ { print $5 }' "$tmp/oracle" | xargs)
    above=$(awk -F'|' '$2 ~ /best shift a (frame|8x8 tile)/ && $4 + 0 >= 0 { n++ } END { print n + 0 }' "$tmp/oracle")
    same=$(awk -v a="$copy_tool" -v b="$copy_eval" 'BEGIN { n = split(a, x, " "); m = split(b, y, " ")
        ok = n == 3 && m == 3; for (i = 1; i <= n; i++) if (x[i] - y[i] > 0.011 || y[i] - x[i] > 0.011) ok = 0; print ok }')
    if [ "$same" = 1 ] && [ "$above" = 2 ]; then
        pass oracle_ceiling_copy "the copy of frame 6 per clip as eval scored it ($copy_tool dB); both shift oracles at or over it"
    else
        fail oracle_ceiling_copy "tool '$copy_tool', eval '$copy_eval', oracles at or over the copy: $above of 2"
    fi
else
    fail oracle_ceiling_copy "$(tail -1 "$tmp/err")"
fi

# Models with the given frames concatenated, delta targets and dropped conditioning, sampled with
# guidance: the same tables, numbers in range, and guidance 1 differs from guidance 2
for role in starter extrapolate interpolate; do
    if ! "$FC" --threads 2 train --config configs/tiny/$role.conf --run "$tmp/g_$role" --steps 4 --set warmup_steps=1 \
        --set checkpoint_every=4 --set cond_concat=anchor+nearest --set targets=deltas --set cond_drop=0.2 \
        > "$tmp/g_$role.log" 2>&1; then
        fail eval_guided_train_$role "$(tail -1 "$tmp/g_$role.log")"
        exit 1
    fi
done
GRUNS=(--starter "$tmp/g_starter" --extrapolate "$tmp/g_extrapolate" --interpolate "$tmp/g_interpolate")
ok=1
for w in 1 2; do
    "$FC" --threads 2 eval "${GRUNS[@]}" "${ARGS[@]}" --long 0 --noise-aug 0.1 --guidance $w --tsv "$tmp/g$w.tsv" \
        > "$tmp/g$w.out" 2> "$tmp/err" || ok=0
done
bad=$(awk -F'\t' '$1 == "quality" && ($4 !~ /^[0-9.]+$/ || $4 < 3 || $4 > 99) { print $4 }' "$tmp/g1.tsv" "$tmp/g2.tsv")
if [ $ok = 1 ] && [ -z "$bad" ] && grep -q 'guidance 2' "$tmp/g2.out" &&
    ! cmp -s <(grep -v '^#' "$tmp/g1.tsv") <(grep -v '^#' "$tmp/g2.tsv") && grep -q '^# guidance: 2$' "$tmp/g2.tsv"; then
    pass eval_guidance "concat + deltas + cond_drop models: guidance 1 and 2 both score, and differ"
else
    fail eval_guidance "status ok=$ok, out-of-range PSNR: ${bad:-none}; $(tail -1 "$tmp/err")"
fi

# From 7 given frames the starter is not run: guidance asks cond_drop of the two models that run, not
# of a starter trained without it (refused, naming the starter, before; it still is without --given)
"$FC" --threads 2 eval --starter "${RUNS[1]}" --extrapolate "$tmp/g_extrapolate" --interpolate "$tmp/g_interpolate" \
    "${ARGS[@]}" --long 0 --given 7 --guidance 2 > "$tmp/gg.out" 2> "$tmp/gg.err"
rc=$?
"$FC" --threads 2 eval --starter "${RUNS[1]}" --extrapolate "$tmp/g_extrapolate" --interpolate "$tmp/g_interpolate" \
    "${ARGS[@]}" --long 0 --guidance 2 > "$tmp/gs.out" 2> "$tmp/gs.err"
rc_s=$?
[ $rc -eq 0 ] && grep -q 'guidance 2' "$tmp/gg.out" && [ $rc_s -eq 1 ] &&
    grep -q "^framechain: --guidance 2: the starter model was trained with cond_drop = 0" "$tmp/gs.err"
expect eval_guidance_given_needs_no_starter $? "status $rc with --given 7: $(grep -m1 '^framechain' "$tmp/gg.err"); status $rc_s without: $(head -1 "$tmp/gs.err" | cut -c1-120)"

# A lower temperature starts the targets from weaker noise: other frames, still in range
"$FC" --threads 2 eval "${GRUNS[@]}" "${ARGS[@]}" --long 0 --noise-aug 0.1 --temperature 0.5 --tsv "$tmp/t05.tsv" \
    > "$tmp/t05.out" 2> "$tmp/err"
rc=$?
bad=$(awk -F'\t' '$1 == "quality" && ($4 !~ /^[0-9.]+$/ || $4 < 3 || $4 > 99) { print $4 }' "$tmp/t05.tsv" 2>/dev/null)
if [ $rc -eq 0 ] && [ -z "$bad" ] && grep -q 'temperature 0.5' "$tmp/t05.out" &&
    ! cmp -s <(grep -v '^#' "$tmp/g1.tsv") <(grep -v '^#' "$tmp/t05.tsv") && grep -q '^# temperature: 0.5$' "$tmp/t05.tsv"; then
    pass eval_temperature "temperature 0.5: scores in range, other frames than at 1"
else
    fail eval_temperature "status $rc, out-of-range PSNR: ${bad:-none}; $(tail -1 "$tmp/err")"
fi
expect_refusal bad_temperature 2 "temperature" "${GRUNS[@]}" --data "$tmp/held32" --temperature -1 --tsv "$tmp/bad.tsv"

# The drift guards: the barely trained chain speckles and drifts; with both guards at 0.05 every frame
# of its drift run stays near frame 0's mean, contrast and sharpness (the colour band is per channel on
# the frames before 8-bit rounding, eval's ratios pooled over channels after it: 0.08 of slack), and
# the real clip's own columns are the same as without them
# max_dev TSV: the largest |ratio - 1| of the drift rows' mean, contrast and sharpness, the columns found
# by the header's names (the first line after the settings' '#' lines)
max_dev() {
    awk -F'\t' '!/^#/ && !header++ { for (i = 1; i <= NF; i++) col[$i] = i }
        $1 == "drift" { for (k = 0; k < 3; k++) { n = k == 0 ? "mean" : k == 1 ? "contrast" : "sharpness";
            v = $(col[n]) - 1; if (v < 0) v = -v; if (v > m) m = v } } END { printf "%.3f", m }' "$1"
}
"$FC" --threads 2 eval "${GRUNS[@]}" "${ARGS[@]}" --long 40 --noise-aug 0.1 --sharpness-guard 0 --tsv "$tmp/free.tsv" > /dev/null 2>&1
"$FC" --threads 2 eval "${GRUNS[@]}" "${ARGS[@]}" --long 40 --noise-aug 0.1 --sharpness-guard 0.05 --colour-guard 0.05 \
    --colour-ramp 0 --tsv "$tmp/guard.tsv" > "$tmp/guard.out" 2> "$tmp/err"
rc=$?
free_dev=$(max_dev "$tmp/free.tsv") guard_dev=$(max_dev "$tmp/guard.tsv")
real_cols() { awk -F'\t' '$1 == "drift" { print $3, $11, $12, $13 }' "$1"; }
if [ $rc -eq 0 ] && grep -q "^eval: drift guards: sharpness at most 1.05x frame 0's, colour channel means and contrasts within 0.95-1.05x" "$tmp/guard.out" &&
    awk -v f="$free_dev" -v g="$guard_dev" 'BEGIN { exit !(f > 0.2 && g <= 0.08) }' &&
    [ "$(real_cols "$tmp/free.tsv")" = "$(real_cols "$tmp/guard.tsv")" ] && [ -n "$(real_cols "$tmp/guard.tsv")" ]; then
    pass eval_drift_guards "drift run's worst ratio off frame 0's by $free_dev without the guard, $guard_dev with 0.05"
else
    fail eval_drift_guards "status $rc, worst ratio off by $free_dev without, $guard_dev with: $(tail -1 "$tmp/err")"
fi
# The colour band's ramp: with a ramp of 20 frames, the drift run's frames from 20 after the given one
# on are held as tightly as with no ramp (0.08 of slack, as above), and the frames before it are free
# to move further (this barely trained chain's colours move past the band there); with the sharpness
# guard alone, further still
dev_range() {  # the largest |ratio - 1| of mean and contrast over the drift rows of frames LO..HI
    awk -F'\t' -v lo="$2" -v hi="$3" '$1 == "drift" && $3 >= lo && $3 <= hi { for (k = 8; k <= 9; k++) {
        v = $k - 1; if (v < 0) v = -v; if (v > m) m = v } } END { printf "%.3f", m }' "$1"
}
"$FC" --threads 2 eval "${GRUNS[@]}" "${ARGS[@]}" --long 40 --noise-aug 0.1 --sharpness-guard 0.05 --colour-guard 0.05 \
    --colour-ramp 20 --tsv "$tmp/ramp.tsv" > "$tmp/ramp.out" 2> "$tmp/err"
rc=$?
near=$(dev_range "$tmp/ramp.tsv" 1 19) far=$(dev_range "$tmp/ramp.tsv" 20 40) held_near=$(dev_range "$tmp/guard.tsv" 1 19)
if [ $rc -eq 0 ] && grep -q "colour channel means and contrasts within 0.95-1.05x frame 0's from 20 frames after the last given one" "$tmp/ramp.out" &&
    awk -v n="$near" -v f="$far" -v h="$held_near" 'BEGIN { exit !(f <= 0.08 && n > 0.08 && n > h) }'; then
    pass eval_colour_ramp "ramp of 20 frames: mean and contrast off frame 0's by up to $near on frames 1-19 (held from the first: $held_near), $far from frame 20 on"
else
    fail eval_colour_ramp "status $rc, off by $near on frames 1-19 (held from the first: $held_near), $far from frame 20: $(tail -1 "$tmp/err")"
fi
expect_refusal bad_colour_ramp 2 "colour-ramp" "${GRUNS[@]}" --data "$tmp/held32" --colour-ramp -3 --tsv "$tmp/bad.tsv"
expect_refusal bad_sharpness_guard 2 "sharpness-guard" "${GRUNS[@]}" --data "$tmp/held32" --sharpness-guard 1.5 \
    --tsv "$tmp/bad.tsv"
expect_refusal bad_colour_guard 2 "colour-guard" "${GRUNS[@]}" --data "$tmp/held32" --colour-guard -0.1 --tsv "$tmp/bad.tsv"

# ---- a starter whose weights blew up (its forward is NaN): eval stops at the first clip, naming the
# model, exit 1, no table (it scored black frames, exit 0)
"$FC" --threads 2 train --config configs/tiny/starter.conf --run "$tmp/blown" --steps 5 --set lr=1 --set lr_min_ratio=1 \
    --set warmup_steps=0 --set grad_clip=0 > "$tmp/blown.log" 2>&1
"$FC" --threads 2 eval --starter "$tmp/blown" "${RUNS[@]:2}" --data "$tmp/held32" --clips 1 --frames 11 --steps 2 \
    --long 0 --tsv "$tmp/blown.tsv" > "$tmp/blown.out" 2>&1
rc=$?
said=$(grep -c "eval: clip 1, noise-aug 0: window 1 of [0-9]*: the starter model (step 5) made [0-9]* NaN" "$tmp/blown.out")
expect eval_nan_model_refused $(( rc != 1 || said != 1 || $(ls "$tmp" | grep -c '^blown\.tsv') != 0 )) \
    "status $rc, $(tail -1 "$tmp/blown.out" | cut -c1-140)"
