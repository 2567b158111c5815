#!/usr/bin/env bash
# tools/eval_unseen.sh (make eval, and the GPU's eval64 table) before it trains anything: a set it
# does not know stops it at once, and it prepares only the datasets of the sets it scores, each from
# its source files where it is missing. A machine with the datasets prepared elsewhere (a GPU machine
# may have neither opencv-doc nor FFmpeg) needs no source file; a missing one is named in one line,
# before any model is trained. Nothing is trained here: every run stops at its data. And
# tools/shapes_events.py reads an eval TSV with eval's settings lines as one without them. Last, the
# tables of eval_unseen.sh and eval_real.sh (with a framechain stand-in): an eval that fails or is
# stopped leaves the earlier table; their folders (another's refused, the keys without one) and a rerun
# with other settings than the models', said before any work; strip.sh's arguments.
set -u
. "$(dirname "$0")/../lib.sh"
EVAL="env FC=$FC EVAL_CONFIGS=configs/tiny EVAL_STEPS=1 EVAL_DATA_DIR=$tmp/no-opencv-doc tools/eval_unseen.sh"

# ---- a set it does not know: stopped before anything is made ----
EVAL_SETS="real fog" $EVAL "$tmp/unknown" > "$tmp/unknown.log" 2>&1
status=$?
[ $status -eq 2 ] && grep -q "unknown set 'fog'" "$tmp/unknown.log" && [ ! -e "$tmp/unknown" ]
expect eval_unseen_unknown_set $? "status $status: $(tail -1 "$tmp/unknown.log")"

# ---- no training footage and no opencv-doc: the missing file named, nothing trained ----
EVAL_SETS=shapes $EVAL "$tmp/bare" > "$tmp/bare.log" 2>&1
status=$?
[ $status -eq 1 ] && [ "$(wc -l < "$tmp/bare.log")" -eq 1 ] &&
    grep -q "no-opencv-doc/vtest.avi is missing (apt-get install opencv-doc)" "$tmp/bare.log" &&
    [ ! -e "$tmp/bare/starter" ]
expect eval_unseen_names_missing_source $? "status $status: $(head -1 "$tmp/bare.log")"

# ---- the training footage prepared elsewhere: only the scored sets' sources are looked for ----
work=$tmp/prepared
"$FC" prepare --input shapes:7:48 --out "$work/train" --size 32 --clip-frames 32 > "$tmp/prep.log" 2>&1 ||
    fail eval_unseen_prepared_train "prepare: $(tail -1 "$tmp/prep.log")"
EVAL_SETS=real $EVAL "$work" > "$tmp/real.log" 2>&1
status=$?
[ $status -eq 1 ] && grep -q "no-opencv-doc/Megamind.avi is missing" "$tmp/real.log" &&
    ! grep -q "vtest.avi" "$tmp/real.log" && [ ! -e "$work/starter" ] && [ ! -e "$work/pans" ] &&
    [ ! -e "$work/zooms" ] && [ ! -e "$work/shapes" ]
expect eval_unseen_prepares_scored_sets_only $? \
    "status $status: $(tail -1 "$tmp/real.log"); made: $(ls "$work" | tr '\n' ' ')"

# ---- tools/shapes_events.py on an eval TSV with the settings eval writes ('#' lines before the
# header) and on one written before them: the same clips read, the same numbers ----
{
    printf 'section\tnoise_aug\tframe\tpsnr_chain\tpsnr_copy\tssim_chain\tssim_copy\tmean\tcontrast\tsharpness\t'
    printf 'real_mean\treal_contrast\treal_sharpness\tpsnr_hold0\tssim_hold0\tmotion_chain\tmotion_real\n'
    for k in 1 2 3 4 5 6 7 8; do
        printf 'clip\t0.1\t%d\t%d.5\t2%d.25\tnan\tnan\tnan\tnan\tnan\tnan\tnan\tnan\tnan\tnan\tnan\tnan\n' $k $((20 + k % 3)) $((k % 2))
    done
} > "$tmp/old.tsv"
{ printf '# framechain 0.1.0 eval: the settings of these scores\n# starter: runs/s (step 4)\n# seed: 1\n'
  cat "$tmp/old.tsv"; } > "$tmp/settings.tsv"
for t in old settings; do
    BUILD=${BUILD:-build} "${PYTHON:-python3}" tools/shapes_events.py "$tmp/$t.tsv" 1000001 > "$tmp/events_$t.txt" 2>&1
    echo $? > "$tmp/events_$t.rc"
done
[ "$(cat "$tmp/events_old.rc" "$tmp/events_settings.rc")" = "0
0" ] && grep -q "settings.tsv: 8 clips" "$tmp/events_settings.txt" &&
    diff <(tail -n +2 "$tmp/events_old.txt") <(tail -n +2 "$tmp/events_settings.txt") > /dev/null
expect shapes_events_reads_settings_tsv $? \
    "status $(cat "$tmp/events_old.rc") without the settings, $(cat "$tmp/events_settings.rc") with: $(head -2 "$tmp/events_settings.txt" | tr '\n' ' ')"

# ---- the tables: NAME.txt is replaced only by an eval that has finished. A framechain stand-in
# (train does nothing, eval prints a table line, then ends as FAKE_EVAL says) on datasets taken as
# prepared: an eval that fails, or a run stopped by SIGTERM mid-table, leaves the earlier table whole
# and no part of the new one; a finished eval replaces it ----
cat > "$tmp/fake-fc" << 'FAKE'
#!/usr/bin/env bash
[ "$1" = eval ] || exit 0
echo "eval: the new table, first line"
case $FAKE_EVAL in
    fail) echo "framechain: a failure" >&2; exit 1 ;;
    hang) sleep 60 ;;
esac
echo "eval: the new table, last line"
FAKE
chmod +x "$tmp/fake-fc"
tables="$tmp/tables dir"
mkdir -p "$tables/train" "$tables/real"
touch "$tables/train/dataset.json" "$tables/real/dataset.json" "$tables/train.json"
tables_earlier() {  # the earlier tables in place, whole
    echo "the earlier table" > "$tables/real.txt"
    echo "the earlier table" > "$tables/eval.txt"
}
tables_kept() {  # both earlier tables whole, no part of a new one anywhere
    [ "$(cat "$tables/real.txt" "$tables/eval.txt")" = "the earlier table
the earlier table" ] && ! have "$tables/*partial*"
}
unseen() { env FC="$tmp/fake-fc" EVAL_SETS=real EVAL_STEPS=1 tools/eval_unseen.sh "$tables"; }
real() { env FC="$tmp/fake-fc" EVAL_STEPS=1 tools/eval_real.sh "$tables"; }

tables_earlier
FAKE_EVAL=fail unseen > "$tmp/unseen-fail.log" 2>&1
s_unseen=$?
FAKE_EVAL=fail real > "$tmp/real-fail.log" 2>&1
s_real=$?
[ $s_unseen -ne 0 ] && [ $s_real -ne 0 ] && tables_kept
expect eval_tables_failed_eval_keeps_earlier $? \
    "status $s_unseen (eval_unseen), $s_real (eval_real); real.txt: $(head -1 "$tables/real.txt"); eval.txt: \
$(head -1 "$tables/eval.txt"); $(ls "$tables" | tr '\n' ' ')"

stopped=""
for script in unseen real; do
    tables_earlier
    # a group of its own, as a terminal's Ctrl-C stops the script with its eval
    setsid env FC="$tmp/fake-fc" FAKE_EVAL=hang EVAL_SETS=real EVAL_STEPS=1 "tools/eval_$script.sh" "$tables" \
        > "$tmp/$script-term.log" 2>&1 &
    pid=$!
    wait_until 60 $pid grep -q "first line" "$tmp/$script-term.log"
    exec 3>&2 2> /dev/null  # bash's notice of a job ended by a signal goes nowhere (kill9_reap's reason)
    kill -TERM -- -$pid
    wait $pid
    status=$?
    exec 2>&3 3>&-
    tables_kept && [ -z "$waited" ] && [ $status -ne 0 ] || stopped="$stopped $script (status $status $waited)"
done
[ -z "$stopped" ]
expect eval_tables_stopped_run_keeps_earlier $? \
    "stopped by SIGTERM mid-table, the earlier tables not kept by:${stopped:- neither}; real.txt: \
$(head -1 "$tables/real.txt"); eval.txt: $(head -1 "$tables/eval.txt"); $(ls "$tables" | tr '\n' ' ')"

tables_earlier
FAKE_EVAL=finish unseen > "$tmp/unseen-ok.log" 2>&1
s_unseen=$?
FAKE_EVAL=finish real > "$tmp/real-ok.log" 2>&1
s_real=$?
[ $s_unseen -eq 0 ] && [ $s_real -eq 0 ] && grep -q "last line" "$tables/real.txt" "$tables/real_given7.txt" &&
    grep -q "last line" "$tables/eval.txt" && ! have "$tables/*partial*"
expect eval_tables_finished_eval_replaces $? \
    "status $s_unseen (eval_unseen), $s_real (eval_real); real.txt: $(tail -1 "$tables/real.txt"); eval.txt: \
$(tail -1 "$tables/eval.txt")"

# ---- eval_real.sh in a folder it did not make (make eval's, with its own train/ dataset): refused,
# the folder as it was (making its datasets afresh would have removed train/) ----
other="$tmp/other script"
mkdir -p "$other/train" && echo kept > "$other/train/dataset.json"
env FC="$tmp/fake-fc" EVAL_STEPS=1 tools/eval_real.sh "$other" > "$tmp/other.log" 2>&1
status=$?
[ $status -eq 1 ] && grep -q "holds files this script did not make" "$tmp/other.log" &&
    [ "$(cat "$other/train/dataset.json")" = kept ] && [ "$(ls -A "$other")" = train ]
expect eval_real_refuses_another_folder $? "status $status: $(tail -1 "$tmp/other.log"); left: $(ls -A "$other" | tr '\n' ' ')"

# ---- eval_unseen.sh in a folder it did not make (a user's, whose train/ and segments/ hold no
# dataset.json): refused, the folder as it was (its sets' folders without a dataset.json are made
# afresh, removed first) ----
theirs="$tmp/their folder"
mkdir -p "$theirs/train" "$theirs/segments" && echo precious > "$theirs/train/notes.txt" && echo mine > "$theirs/segments/clip.mkv"
env FC="$tmp/fake-fc" EVAL_SETS=real EVAL_STEPS=1 tools/eval_unseen.sh "$theirs" > "$tmp/theirs.log" 2>&1
status=$?
[ $status -eq 1 ] && grep -q "holds files this script did not make" "$tmp/theirs.log" &&
    [ "$(cat "$theirs/train/notes.txt" "$theirs/segments/clip.mkv")" = "precious
mine" ] && [ "$(ls -A "$theirs" | tr '\n' ' ')" = "segments train " ]
expect eval_unseen_refuses_another_folder $? "status $status: $(tail -1 "$tmp/theirs.log"); left: $(ls -A "$theirs" | tr '\n' ' ')"

# ---- keys given without the work folder: said, nothing made (they were taken for the folder's name) ----
mkdir -p "$tmp/keys_cwd"
(cd "$tmp/keys_cwd" && env FC="$tmp/fake-fc" EVAL_SETS=real EVAL_STEPS=1 "$OLDPWD/tools/eval_unseen.sh" delta_reference=nearest) > "$tmp/keys.log" 2>&1
status=$?
[ $status -eq 2 ] && grep -q "'delta_reference=nearest': the work folder comes first" "$tmp/keys.log" && [ -z "$(ls -A "$tmp/keys_cwd")" ]
expect eval_unseen_keys_without_work_folder $? "status $status: $(tail -1 "$tmp/keys.log"); made: $(ls -A "$tmp/keys_cwd" | tr '\n' ' ')"

# ---- a rerun that asks for other steps or keys than its models were trained with (train would refuse
# their checkpoints after the data): said at once, in one line, the folder as it was; the same
# settings go on ----
for role in starter extrapolate interpolate; do mkdir -p "$tables/$role" && touch "$tables/$role/ckpt-00000001.safetensors"; done
ls -lR "$tables" > "$tmp/tables_before.txt"
env FC="$tmp/fake-fc" EVAL_SETS=real EVAL_STEPS=2 tools/eval_unseen.sh "$tables" > "$tmp/steps_u.log" 2>&1
s_steps=$?
env FC="$tmp/fake-fc" EVAL_SETS=real EVAL_STEPS=1 tools/eval_unseen.sh "$tables" lr=1e-3 > "$tmp/keys_u.log" 2>&1
s_keys=$?
env FC="$tmp/fake-fc" EVAL_STEPS=2 tools/eval_real.sh "$tables" > "$tmp/steps_r.log" 2>&1
s_real=$?
ls -lR "$tables" > "$tmp/tables_after.txt"
env FC="$tmp/fake-fc" FAKE_EVAL=finish EVAL_SETS=real EVAL_STEPS=1 tools/eval_unseen.sh "$tables" > "$tmp/same_u.log" 2>&1
s_same=$?
[ "$s_steps $s_keys $s_real $s_same" = "1 1 1 0" ] && cmp -s "$tmp/tables_before.txt" "$tmp/tables_after.txt" &&
    [ "$(cat "$tmp/steps_u.log" "$tmp/keys_u.log" "$tmp/steps_r.log" | wc -l)" -eq 3 ] &&
    grep -q "trained with EVAL_STEPS=1, configs of cksum [0-9]*; this run asks for EVAL_STEPS=2, .*: give another work folder" "$tmp/steps_u.log" &&
    grep -q "this run asks for EVAL_STEPS=1, configs of cksum [0-9]*, keys lr=1e-3: give another work folder" "$tmp/keys_u.log" &&
    grep -q "trained with EVAL_STEPS=1; this run asks for EVAL_STEPS=2: give another work folder" "$tmp/steps_r.log"
expect eval_scripts_other_settings_said_first $? "status $s_steps (EVAL_STEPS), $s_keys (a key), $s_real (eval_real), $s_same (the same); \
$(head -1 "$tmp/keys_u.log" | cut -c1-200); folder $(cmp -s "$tmp/tables_before.txt" "$tmp/tables_after.txt" && echo unchanged || echo changed)"

# ---- strip.sh: bad numbers and an output folder that is not there are said before the chain is made
# (a stand-in framechain that notes each call) ----
printf '#!/usr/bin/env bash\necho called >> "%s/strip-calls"\n' "$tmp" > "$tmp/note-fc" && chmod +x "$tmp/note-fc"
s_every=$(FC="$tmp/note-fc" EVERY=0 tools/strip.sh runs shapes:1 "$tmp/s.png" > "$tmp/strip1.log" 2>&1; echo $?)
s_frames=$(FC="$tmp/note-fc" tools/strip.sh runs shapes:1 "$tmp/s.png" 12x > "$tmp/strip2.log" 2>&1; echo $?)
s_dir=$(FC="$tmp/note-fc" tools/strip.sh runs shapes:1 "$tmp/nowhere/s.png" > "$tmp/strip3.log" 2>&1; echo $?)
s_ext=$(FC="$tmp/note-fc" tools/strip.sh runs shapes:1 "$tmp/s" > "$tmp/strip4.log" 2>&1; echo $?)
[ "$s_every $s_frames $s_dir $s_ext" = "2 2 1 2" ] && [ ! -e "$tmp/strip-calls" ] && grep -q "EVERY=0: a whole number from 1 up" "$tmp/strip1.log" &&
    grep -q "FRAMES=12x" "$tmp/strip2.log" && grep -q "nowhere/s.png: the folder .* does not exist" "$tmp/strip3.log" &&
    grep -q "s: the strip is a PNG image, its name ends in .png" "$tmp/strip4.log"
expect strip_checks_arguments_first $? "status $s_every (EVERY=0), $s_frames (FRAMES 12x), $s_dir (a missing folder), $s_ext (no .png); \
framechain called: $([ -e "$tmp/strip-calls" ] && wc -l < "$tmp/strip-calls" || echo 0) times; $(head -1 "$tmp/strip1.log")"

# strip.sh run from another folder without FC: the repository's framechain makes the chain (here it
# refuses the runs, which are not there), not a ./framechain of that folder
mkdir -p "$tmp/strip_cwd"
(cd "$tmp/strip_cwd" && env -u FC "$OLDPWD/tools/strip.sh" "$tmp/no-runs" shapes:1 "$tmp/s.png" 7) > "$tmp/strip5.log" 2>&1
status=$?
[ $status -ne 0 ] && grep -q "^framechain: --starter .*no-runs/starter: no such run folder" "$tmp/strip5.log" && ! grep -q "No such file" "$tmp/strip5.log"
expect strip_out_of_the_repository $? "status $status: $(head -1 "$tmp/strip5.log" | cut -c1-160)"

# Run from another folder with no WORK_DIR, a copy of each script in a repository of its own (a
# framechain there that fails at once, no opencv-doc) makes its folder under the repository's out/
# before it stops; the folder it ran from gets nothing.
mkdir -p "$tmp/lit/repo/tools" "$tmp/lit/cwd"
printf '#!/bin/sh\necho "framechain: stub"; exit 1\n' > "$tmp/lit/repo/framechain" && chmod +x "$tmp/lit/repo/framechain"
out_of_repository eval_scripts_out_of_the_repository "eval_real:eval eval_unseen:eval-unseen" -u FC EVAL_DATA_DIR="$tmp/no-opencv-doc" EVAL_SIZE=32
