#!/usr/bin/env bash
# tools/eval_unseen.sh (make eval, and the GPU's eval64 table) before it trains anything: a set it
# does not know stops it at once, and it prepares only the datasets of the sets it scores, each from
# its source files where it is missing. A machine with the datasets prepared elsewhere (a GPU machine
# may have neither opencv-doc nor FFmpeg) needs no source file; a missing one is named in one line,
# before any model is trained. Nothing is trained here: every run stops at its data.
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
