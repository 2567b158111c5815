#!/usr/bin/env bash
# make eval: the chain on scenes it never saw. The three small models (configs/small/, the demo's
# networks and budget) train on vtest.avi and tree.avi (opencv-doc). Then `framechain eval` scores
# the chain against the truth, beside holding the last given frame:
#   real:   Megamind.avi, another scene, in its stretches without a cut (frames 2-97, 99-146 and
#           201-248: 4 clips of 48 frames), from each clip's first frame;
#   pans:   synthetic camera pans over four photographs (synthetic.h; no still is used in training):
#           48 frames from the first frame; 1000 frames from the first 7 (eval --given 7), with the
#           drift of mean, contrast and sharpness over 1000 frames;
#   zooms:  synthetic camera zooms over the same photographs, 1000 frames from the first 7, the drift;
#   shapes: the built-in moving shapes, clips never drawn in training, 1000 frames from the first 7,
#           with the drift over 1000 frames; and 48 clips of 48 frames from the first 7, for the next
#           40 frames over more clips than the long runs can afford (clip to clip their score moves by
#           about 2 dB: 3 clips cannot tell the mean to better than about 1).
# The real set is scored twice: sampling from the trained prior (temperature 1, whatever the models'
# sample_temperature), and at temperature 0.7.
# Usage: tools/eval_unseen.sh [WORK_DIR] [key=value ...]   (the keys go to all three models' configs)
# EVAL_STEPS: training steps a model (default 800); EVAL_SETS: which of "real pans zooms shapes" to
# run (only their datasets are prepared, where missing); EVAL_DATA_DIR: opencv-doc's data folder;
# EVAL_STARTER=RUN: chain with that starter instead of training one (to compare the other two roles);
# EVAL_CONFIGS: the three models' configs (default configs/small; configs/eval64: the larger models
# of the GPU table, 64x64 frames), EVAL_SIZE: the frames' size of the datasets, which must be the
# configs' frame_size (default: theirs). The device is framechain's default: a GPU where there is one.
# A rerun goes on from the models it finds; one that asks for other EVAL_STEPS, configs or keys than
# they were trained with is refused at once (another WORK_DIR trains anew). WORK_DIR is this script's
# alone (its mark: .eval_unseen): a folder holding other files is refused.
# pipefail: a failing `framechain eval` is the pipeline's status, not tee's.
set -euo pipefail
usage="usage: tools/eval_unseen.sh [WORK_DIR] [key=value ...]"
case "${1:-}" in
    -h | --help) echo "$usage"; exit 0 ;;
    -*) echo "eval_unseen: unknown option '$1'; $usage" >&2; exit 2 ;;
esac
case "${1:-}" in
    *=*) echo "eval_unseen: '$1': the work folder comes first, then the keys; $usage" >&2; exit 2 ;;
esac
for kv in "${@:2}"; do
    case $kv in *=*) ;; *) echo "eval_unseen: '$kv' is not key=value; $usage" >&2; exit 2 ;; esac
done
root=$(cd -- "$(dirname -- "$0")/.." && pwd)  # the repository: its defaults below, wherever this runs from
FC=${FC:-$root/framechain}
STEPS=${EVAL_STEPS:-800}
SETS=${EVAL_SETS:-real pans zooms shapes}
CONFIGS=${EVAL_CONFIGS:-$root/configs/small}
SIZE=${EVAL_SIZE:-$(sed -nE 's/^frame_size *= *([0-9]+).*/\1/p' "$CONFIGS/starter.conf")}
. "$root/tools/checks.sh"
positive_whole eval_unseen "EVAL_STEPS=$STEPS" "EVAL_SIZE=$SIZE"
work=${1:-$root/out/eval-unseen}
shift || true
set_args=()
for s in "$@"; do set_args+=(--set "$s"); done
# The folder is this script's: one it did not make is refused, since a dataset folder found without
# its dataset.json (a prepare cut off) is made afresh, removed first. Its mark: .eval_unseen (or, in
# folders made before the mark was, train/dataset.json).
if [ -d "$work" ] && [ -n "$(ls -A -- "$work")" ] && [ ! -f "$work/.eval_unseen" ] && [ ! -f "$work/train/dataset.json" ]; then
    echo "eval_unseen: $work holds files this script did not make (no $work/.eval_unseen); give another folder" >&2
    exit 1
fi
# What the models under $work were trained with (in the mark, once they are): a rerun that asks for
# other steps, configs or keys is refused now, before any work, rather than by train after the data
configs_sum=$({ cat "$CONFIGS"/{starter,extrapolate,interpolate}.conf 2> /dev/null || true; } | cksum | cut -d' ' -f1)
# (the configs by their bytes, not their path; the keys in any order)
keys=$(printf '%s\n' "$@" | sort | tr '\n' ' ' | sed 's/ *$//')
trained_with="EVAL_STEPS=$STEPS, configs of cksum $configs_sum${keys:+, keys $keys}"
trained_as eval_unseen "$work" .eval_unseen "$trained_with"
DATA_DIR=${EVAL_DATA_DIR:-/usr/share/doc/opencv-doc/examples/data}
for set in $SETS; do
    case $set in real | pans | zooms | shapes) ;; *) echo "eval_unseen: unknown set '$set' (real, pans, zooms, shapes)" >&2; exit 2 ;; esac
done
# A dataset is prepared only where it is missing and its set is scored, so that datasets prepared
# elsewhere (a GPU machine may have neither opencv-doc nor FFmpeg) are all a run needs.
need() {  # the source files of a dataset about to be prepared
    for f in "$@"; do
        [ -f "$DATA_DIR/$f" ] || { echo "eval_unseen: $DATA_DIR/$f is missing (apt-get install opencv-doc)" >&2; exit 1; }
    done
}
scored() { case " $SETS " in *" $1 "*) return 0 ;; esac; return 1; }
mkdir -p -- "$work"
touch "$work/.eval_unseen"

# ---- data: training footage, and the three held-out sets ----
if [ ! -f "$work/train/dataset.json" ]; then
    need vtest.avi tree.avi
    rm -rf "$work/train"
    "$FC" prepare --input "$DATA_DIR/vtest.avi" --input "$DATA_DIR/tree.avi" --out "$work/train" --size "$SIZE" \
        --clip-frames 32 --overlap 16
fi
if scored real && [ ! -f "$work/real/dataset.json" ]; then
    need Megamind.avi
    rm -rf "$work/real" "$work/segments"
    mkdir -p "$work/segments"
    for seg in 2:97 99:146 201:248; do
        ffmpeg -v error -y -i "$DATA_DIR/Megamind.avi" -an -vf "select=between(n\,${seg%:*}\,${seg#*:})" -vsync 0 \
            -c:v ffv1 "$work/segments/megamind_${seg%:*}.mkv"
    done
    "$FC" prepare --input "$work/segments" --out "$work/real" --size "$SIZE" --clip-frames 48
fi
if scored pans && [ ! -f "$work/pans/dataset.json" ]; then
    need fruits.jpg building.jpg baboon.jpg home.jpg
    rm -rf "$work/pans"
    pans=()
    for img in fruits building baboon home; do pans+=(--input "pan:$DATA_DIR/$img.jpg:1000"); done
    "$FC" prepare "${pans[@]}" --out "$work/pans" --size "$SIZE" --clip-frames 1000
fi
if scored zooms && [ ! -f "$work/zooms/dataset.json" ]; then
    need fruits.jpg building.jpg baboon.jpg home.jpg
    rm -rf "$work/zooms"
    zooms=()
    for img in fruits building baboon home; do zooms+=(--input "zoom:$DATA_DIR/$img.jpg:1000"); done
    "$FC" prepare "${zooms[@]}" --out "$work/zooms" --size "$SIZE" --clip-frames 1000
fi
if scored shapes && [ ! -f "$work/shapes/dataset.json" ]; then
    rm -rf "$work/shapes"
    "$FC" prepare --input shapes:1000001:1000 --input shapes:1000002:1000 --input shapes:1000003:1000 \
        --out "$work/shapes" --size "$SIZE" --clip-frames 1000
fi
if scored shapes && [ ! -f "$work/shapes48/dataset.json" ]; then
    rm -rf "$work/shapes48"
    shapes=()
    for k in $(seq 1000001 1000048); do shapes+=(--input "shapes:$k:48"); done
    "$FC" prepare "${shapes[@]}" --out "$work/shapes48" --size "$SIZE" --clip-frames 48
fi

# ---- the three models ----
# A rerun goes on from the runs it finds (a finished one has nothing to do): models trained by an
# earlier build are scored as they are. Said here, so that no table passes for this build's by mistake.
for role in starter extrapolate interpolate; do
    [ "$role" = starter ] && [ -n "${EVAL_STARTER:-}" ] && continue
    if ls "$work/$role"/ckpt-*.safetensors > /dev/null 2>&1; then
        echo "eval_unseen: $work/$role holds checkpoints already (the newest of $(stat -c %y "$(ls "$work/$role"/ckpt-*.safetensors | tail -1)" | cut -d. -f1)): going on from them; remove $work to train with this build from nothing"
    fi
    "$FC" train --config "$CONFIGS/$role.conf" --run "$work/$role" --data "$work/train" --steps "$STEPS" \
        --set checkpoint_every=200 "${set_args[@]}"
done
echo "$trained_with" > "$work/.eval_unseen"

# ---- the chain on each held-out set ----
runs=(--starter "${EVAL_STARTER:-$work/starter}" --extrapolate "$work/extrapolate" --interpolate "$work/interpolate")
# A table becomes NAME.txt once its eval has finished: one interrupted or failed leaves the earlier
# table whole, beside the earlier NAME.tsv (eval writes that through a temporary file too).
partial=""
trap '[ -z "$partial" ] || rm -f -- "$partial"' EXIT
score() {  # name, then eval options
    local name=$1; shift
    echo "== eval_unseen: $name"
    # temperature 1 unless the run says otherwise: the tables compare with each other, whatever
    # sample_temperature the models carry (as --steps 10 holds the steps)
    local temperature=(--temperature 1)
    case " $* ${EVAL_ARGS:-} " in *" --temperature "*) temperature=() ;; esac
    partial="$work/$name.txt.partial"
    # shellcheck disable=SC2086
    # --overwrite: a rerun writes its tables again
    "$FC" eval "${runs[@]}" --noise-aug 0.1 --steps 10 "${temperature[@]}" --tsv "$work/$name.tsv" --overwrite "$@" \
        ${EVAL_ARGS:-} | tee "$partial"
    mv -- "$partial" "$work/$name.txt"
    partial=""
}
for set in $SETS; do
    case $set in
    real) score real --data "$work/real" --clips 4 --frames 48 --long 181
          score real_t07 --data "$work/real" --clips 4 --frames 48 --long 181 --temperature 0.7
          score real_given7 --data "$work/real" --clips 4 --frames 48 --long 0 --given 7 ;;
    pans) score pans --data "$work/pans" --clips 4 --frames 48 --long 0
          score pans_given7 --data "$work/pans" --clips 4 --frames 1000 --long 1000 --given 7 ;;
    zooms) score zooms_given7 --data "$work/zooms" --clips 4 --frames 1000 --long 1000 --given 7 ;;
    shapes) score shapes48_given7 --data "$work/shapes48" --clips 48 --frames 48 --long 0 --given 7
            score shapes_given7 --data "$work/shapes" --clips 3 --frames 1000 --long 1000 --given 7 ;;
    esac
done
