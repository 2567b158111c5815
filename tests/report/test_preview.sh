#!/usr/bin/env bash
# Previews while training (sample_every, report/preview.h): images at the steps asked for, decoded
# here and checked pixel by pixel (preview_check.py: each frame where the layout puts it, given frames
# the same in both rows, the real row the clips' own frames); the same run gives the same images,
# before and after a stop; previews change nothing the run computes; the windows are recorded (and
# left as they are by a resume that shows the same ones); a preview that cannot be written is skipped
# with a line; preview_data that cannot serve stops train before anything is written.
set -u
. "$(dirname "$0")/../lib.sh"
PYTHON=${PYTHON:-python3}
cp "$(dirname "$0")/pngread.py" "$(dirname "$0")/preview_check.py" "$tmp/"
TINY=configs/tiny
check() { "$PYTHON" "$tmp/preview_check.py" "$@" 2>&1 | tail -1; }
losses() { sed 's/"data_wait_ms.*//' "$1/metrics.jsonl"; }

# ---- the built-in shapes: previews at steps 10, 20 and 30 ----
"$FC" train --config $TINY/starter.conf --run "$tmp/a" --steps 30 --set preview_budget=1 --set sample_every=10 --set checkpoint_every=10 \
    > "$tmp/a.log" 2>&1
rc=$?
imgs=$(cd "$tmp/a/samples" 2> /dev/null && ls step-*.png | tr '\n' ' ')
[ $rc -eq 0 ] && [ "$imgs" = "step-00000010.png step-00000020.png step-00000030.png " ]
expect preview_steps $? "exit $rc, images: ${imgs:-none}"
grep -q '^previews: 3 in [0-9.]* s, [0-9.]*% of the time' "$tmp/a.log"
expect preview_cost_line $? "$(grep '^previews: 3' "$tmp/a.log")"
out=$(check "$tmp/a/samples/step-00000030.png" 32 3 atttttt 2)
[ "${out%% *}" = ok ]
expect preview_layout_shapes $? "$out"
n=$(grep -c '^[0-9]' "$tmp/a/samples/windows.tsv" 2> /dev/null)
[ "$n" = 2 ] && grep -q 'step 0 (no training step draws them)' "$tmp/a/samples/windows.tsv"
expect preview_windows_recorded $? "windows.tsv lists ${n:-no} windows of shapes step 0"

# ---- determinism, and nothing changed in the run (the image's title names the run folder: the same
#      folder each time, the earlier run moved aside) ----
mv "$tmp/a" "$tmp/a1"
"$FC" train --config $TINY/starter.conf --run "$tmp/a" --steps 30 --set preview_budget=1 --set sample_every=10 --set checkpoint_every=10 \
    > /dev/null 2>&1
same=0
for s in 10 20 30; do cmp -s "$tmp/a1/samples/step-000000$s.png" "$tmp/a/samples/step-000000$s.png" && same=$((same + 1)); done
[ $same = 3 ]
expect preview_deterministic $? "$same of 3 images byte-identical in a second run"
"$FC" train --config $TINY/starter.conf --run "$tmp/plain" --steps 30 --set checkpoint_every=10 > /dev/null 2>&1
[ "$(ckpt_tensors "$tmp/a1/ckpt-00000030.safetensors")" = "$(ckpt_tensors "$tmp/plain/ckpt-00000030.safetensors")" ] &&
    cmp -s <(losses "$tmp/a1") <(losses "$tmp/plain")
expect preview_changes_nothing $? "the run with previews and the run without: the same 30 losses and checkpoint tensors"

# the EMA samples, not the weights being trained: an EMA that follows the weights exactly (ema_decay 0)
# trains the same run but previews it otherwise
# (checkpoint writes of 200 ms, each waiting for the last, keep the run going past the signal)
rm -rf "$tmp/a"
FRAMECHAIN_TEST_WRITE_DELAY_MS=200 "$FC" train --config $TINY/starter.conf --run "$tmp/a" --steps 30 --set preview_budget=1 --set sample_every=10 --set checkpoint_every=10 \
    --set ema_decay=0 > /dev/null 2>&1
cmp -s <(losses "$tmp/a1") <(losses "$tmp/a") && ! cmp -s "$tmp/a1/samples/step-00000030.png" "$tmp/a/samples/step-00000030.png"
expect preview_uses_ema $? "ema_decay 0: the same losses, another image at step 30"

# ---- a stop and a resume give the uninterrupted run's images ----
# (checkpoint writes of 200 ms, each waiting for the last, keep the run going past the signal)
rm -rf "$tmp/a"
FRAMECHAIN_TEST_WRITE_DELAY_MS=200 "$FC" train --config $TINY/starter.conf --run "$tmp/a" --steps 30 --set preview_budget=1 --set sample_every=10 --set checkpoint_every=5 \
    > "$tmp/c1.log" 2>&1 &
pid=$!
wait_until 60 $pid trained_past "$tmp/a" "$tmp/c1.log" 12
kill -TERM $pid 2> /dev/null
wait $pid
inode=$(stat -c %i "$tmp/a/samples/windows.tsv" 2> /dev/null)
"$FC" train --config $TINY/starter.conf --run "$tmp/a" --steps 30 --set preview_budget=1 --set sample_every=10 --set checkpoint_every=5 \
    > "$tmp/c2.log" 2>&1
resumed=$(sed -n 's/^resuming .* from step \([0-9]*\) .*/\1/p' "$tmp/c2.log")
stopped=$(sed -n 's/^stopped by SIGTERM at step \([0-9]*\);.*/\1/p' "$tmp/c1.log")
cmp -s "$tmp/a1/samples/step-00000030.png" "$tmp/a/samples/step-00000030.png" && [ -n "$resumed" ] && [ "${stopped:-30}" -lt 30 ]
expect preview_resumed_same $? "stopped at step ${stopped:-none}, resumed from step ${resumed:-?}: step 30's image as the uninterrupted run's"
# the same windows as the record the first process wrote: the file left as it is, no line about it
now=$(stat -c %i "$tmp/a/samples/windows.tsv" 2> /dev/null)
[ -n "$inode" ] && [ "$now" = "$inode" ] && ! grep -q 'windows differ' "$tmp/c2.log"
expect preview_windows_kept_on_resume $? "windows.tsv inode ${inode:-none} before the resume, ${now:-none} after; $(grep -c 'windows differ' "$tmp/c2.log") lines saying they differ"

# the step the stop lands on had its preview due (one every step): the resumed run draws it first
rm -rf "$tmp/b"
B_ARGS=(--config $TINY/starter.conf --run "$tmp/b" --steps 30 --set preview_budget=1 --set sample_every=1 --set checkpoint_every=5)
FRAMECHAIN_TEST_WRITE_DELAY_MS=200 "$FC" train "${B_ARGS[@]}" > "$tmp/b1.log" 2>&1 &
pid=$!
wait_until 60 $pid trained_past "$tmp/b" "$tmp/b1.log" 12
kill -TERM $pid 2> /dev/null
wait $pid
stopped=$(sed -n 's/^stopped by SIGTERM at step \([0-9]*\);.*/\1/p' "$tmp/b1.log")
"$FC" train "${B_ARGS[@]}" > "$tmp/b2.log" 2>&1
n=$(ls "$tmp/b/samples/" 2> /dev/null | grep -c '^step-.*\.png$')
expect preview_of_the_stop_step $(( n != 30 || ${stopped:-30} >= 30 )) \
    "stopped at step ${stopped:-none}; $n of the 30 images after the resume"

# ---- footage: the windows of --data, and of preview_data ----
if "$FC" prepare --input "$SAMPLES/vtest.avi" --out "$tmp/d" --size 32 --clip-frames 16 > "$tmp/prep.log" 2>&1; then
    "$FC" train --config $TINY/starter.conf --run "$tmp/r" --data "$tmp/d" --steps 10 --set preview_budget=1 --set sample_every=10 \
        --set batch_size=4 > "$tmp/r.log" 2>&1
    out=$(check "$tmp/r/samples/step-00000010.png" 32 3 atttttt 4 "$tmp/d" "$tmp/r/samples/windows.tsv" 0 0,1,2,3,4,5,6)
    [ "${out%% *}" = ok ]
    expect preview_layout_footage $? "$out"
    clips=$(awk -F'\t' '/^[0-9]/ {printf "%s ", $3}' "$tmp/r/samples/windows.tsv")
    [ "$clips" = "6 18 30 42 " ]
    expect preview_windows_spaced $? "clips ${clips:-none}of 49"
    # the held-out footage of preview_data: the shapes run of above, continued with other windows
    mkdir -p "$tmp/e"
    "$FC" train --config $TINY/starter.conf --run "$tmp/e/run" --steps 10 --set preview_budget=1 --set sample_every=10 \
        --set preview_data="$tmp/d" > "$tmp/e.log" 2>&1
    out=$(check "$tmp/e/run/samples/step-00000010.png" 32 3 atttttt 2 "$tmp/d" "$tmp/e/run/samples/windows.tsv" 0 \
        0,1,2,3,4,5,6)
    [ "${out%% *}" = ok ] && grep -q "^previews: 2 windows of $tmp/d" "$tmp/e.log"
    expect preview_data_footage $? "$out"
else
    fail preview_prepare "$(tail -1 "$tmp/prep.log")"
fi

# ---- the budget: previews past preview_budget of the time trained are put off, with a line ----
"$FC" train --config $TINY/starter.conf --run "$tmp/budget" --steps 20 --set sample_every=1 \
    --set preview_budget=0.001 > "$tmp/budget.log" 2>&1
rc=$?
taken=$(ls "$tmp/budget/samples" 2> /dev/null | grep -c '^step-')
put_off=$(grep -c '^preview of step [0-9]* put off: the previews have taken' "$tmp/budget.log")
[ $rc -eq 0 ] && [ "$taken" -ge 1 ] && [ $((taken + put_off)) = 20 ] && [ "$put_off" -ge 1 ]
expect preview_budget $? "exit $rc; 20 previews due at 0.1% of the time: $taken taken, $put_off put off with a line"
# the last step's preview is never put off: a run ends with a picture of what it made
[ -f "$tmp/budget/samples/step-00000020.png" ] && ! grep -q '^preview of step 20 put off' "$tmp/budget.log"
expect preview_budget_last_taken $? "step 20 of 20: $(ls "$tmp/budget/samples" 2> /dev/null | grep -c 'step-00000020') image(s)"

# ---- an image that cannot be written: skipped with a line, the run goes on ----
mkdir -p "$tmp/w/samples/step-00000010.png"  # a folder where the image goes: the rename over it fails
"$FC" train --config $TINY/starter.conf --run "$tmp/w" --steps 20 --set preview_budget=1 --set sample_every=10 > "$tmp/w.log" 2>&1
rc=$?
[ $rc -eq 0 ] && grep -q '^preview of step 10 skipped: .*step-00000010.png' "$tmp/w.log" &&
    [ -f "$tmp/w/samples/step-00000020.png" ] && [ -f "$tmp/w/ckpt-00000020.safetensors" ]
expect preview_unwritable_skipped $? "exit $rc; $(grep -m1 '^preview of step' "$tmp/w.log")"
# the summary counts the one written apart from the one skipped (it counted both as taken)
grep -q '^previews: 1 written, 1 skipped, in [0-9.]* s' "$tmp/w.log"
expect preview_summary_counts_skipped $? "$(grep '^previews: [0-9]* .* s, ' "$tmp/w.log")"

# a FIFO where the windows' record goes (a plain open had held the run there for good, deaf to SIGTERM):
# each preview skipped with a line naming it, the run trains to its end; the record's temporary name is
# the process's own, which a later run removes where its writer was killed (it was windows.tsv.tmp,
# which a link could wait at and nothing removed)
mkdir -p "$tmp/fifo/samples" && mkfifo "$tmp/fifo/samples/windows.tsv"
timeout -s KILL 120 "$FC" train --config $TINY/starter.conf --run "$tmp/fifo" --steps 4 --set preview_budget=1 \
    --set sample_every=2 > "$tmp/fifo.log" 2>&1
rc=$?
dead=$(sh -c 'echo $$') && rm "$tmp/fifo/samples/windows.tsv" && echo cut > "$tmp/fifo/samples/windows.tsv.tmp-$dead"
"$FC" train --config $TINY/starter.conf --run "$tmp/fifo" --extend --steps 6 --set preview_budget=1 --set sample_every=2 \
    > "$tmp/fifo2.log" 2>&1
rc2=$?
expect preview_record_fifo_skipped $(( rc != 0 || $(grep -c "^preview of step [24] skipped: .*fifo/samples/windows.tsv: not a regular file (a FIFO)" "$tmp/fifo.log") != 2 ||
    rc2 != 0 || $(grep -c "^removed .*windows.tsv.tmp-$dead, a preview write that was cut off" "$tmp/fifo2.log") != 1 ||
    $(ls "$tmp/fifo/samples" | grep -c tmp) != 0 || $(grep -c '^[0-9]' "$tmp/fifo/samples/windows.tsv" 2> /dev/null || echo 0) != 2 )) \
    "status $rc (137: it hung): $(grep -m1 '^preview of step' "$tmp/fifo.log" | cut -c1-200); status $rc2, left: $(ls "$tmp/fifo/samples" | tr '\n' ' ')"

# ---- preview_data that cannot serve: one line, nothing written ----
"$FC" train --config $TINY/starter.conf --run "$tmp/bad1" --steps 10 --set preview_budget=1 --set sample_every=5 \
    --set preview_data="$tmp/nowhere" > "$tmp/bad1.log" 2>&1
rc=$?
[ $rc -ne 0 ] && [ ! -e "$tmp/bad1" ] && [ "$(wc -l < "$tmp/bad1.log")" = 1 ] && grep -q 'preview_data' "$tmp/bad1.log"
expect preview_data_missing $? "exit $rc: $(cat "$tmp/bad1.log")"
# preview_data without previews is said, not passed over unread (a config file may keep it while a run
# turns its previews off: the run goes on)
"$FC" train --config $TINY/starter.conf --run "$tmp/bad0" --steps 2 --set sample_every=0 \
    --set preview_data="$tmp/nowhere" > "$tmp/bad0.log" 2>&1
rc=$?
[ $rc -eq 0 ] && [ "$(grep -c 'preview_data = .*: not read: .*sample_every is 0' "$tmp/bad0.log")" = 1 ]
expect preview_data_without_previews $? "exit $rc: $(grep -m1 preview_data "$tmp/bad0.log")"
if [ -f "$tmp/d/dataset.json" ]; then  # clips of 16 frames, an extrapolate plan of 25
    "$FC" train --config $TINY/extrapolate.conf --run "$tmp/bad2" --steps 10 --set preview_budget=1 --set sample_every=5 \
        --set preview_data="$tmp/d" > "$tmp/bad2.log" 2>&1
    rc=$?
    [ $rc -ne 0 ] && [ ! -e "$tmp/bad2" ] && grep -q 'preview_data: .*spans 25 frames' "$tmp/bad2.log"
    expect preview_data_too_short $? "exit $rc: $(tail -1 "$tmp/bad2.log")"
fi

# ---- the extrapolate role: context slots given, on the shapes ----
"$FC" train --config $TINY/extrapolate.conf --run "$tmp/x" --steps 10 --set preview_budget=1 --set sample_every=10 > /dev/null 2>&1
out=$(check "$tmp/x/samples/step-00000010.png" 32 3 acccttt 2 2>&1)
[ "${out%% *}" = ok ]
expect preview_layout_extrapolate $? "$out"
