#!/usr/bin/env bash
# make eval: the chain on a scene it never saw. The three small models (configs/small/, the demo's
# networks and budget) train on vtest.avi and tree.avi (opencv-doc); `framechain eval` then starts
# the chain from the first frames of Megamind.avi's clips, another scene, and scores it against the
# real continuation beside holding frame 0. The moving shapes follow, where the truth is known to
# any length.
# Usage: tools/eval_unseen.sh [WORK_DIR] [--set key=value ...]   (the sets go to all three models)
# EVAL_STEPS: training steps a model (default 800); EVAL_ARGS: more `framechain eval` options.
set -eu
FC=${FC:-./framechain}
STEPS=${EVAL_STEPS:-800}
work=${1:-out/eval-unseen}
shift || true
set_args=()
for s in "$@"; do set_args+=(--set "$s"); done
DATA_DIR=/usr/share/doc/opencv-doc/examples/data
for f in vtest.avi tree.avi Megamind.avi; do
    [ -f "$DATA_DIR/$f" ] || { echo "eval_unseen: $DATA_DIR/$f is missing (apt-get install opencv-doc)" >&2; exit 1; }
done
mkdir -p "$work"
if [ ! -f "$work/unseen/dataset.json" ]; then
    rm -rf "$work/train" "$work/unseen"
    "$FC" prepare --input "$DATA_DIR/vtest.avi" --input "$DATA_DIR/tree.avi" --out "$work/train" --size 32 \
        --clip-frames 32 --overlap 16
    "$FC" prepare --input "$DATA_DIR/Megamind.avi" --out "$work/unseen" --size 32 --clip-frames 48
fi
for role in starter extrapolate interpolate; do
    "$FC" train --config "configs/small/$role.conf" --run "$work/$role" --data "$work/train" --steps "$STEPS" \
        --set checkpoint_every=200 "${set_args[@]}"
done
runs=(--starter "$work/starter" --extrapolate "$work/extrapolate" --interpolate "$work/interpolate")
# shellcheck disable=SC2086
"$FC" eval "${runs[@]}" --data "$work/unseen" --clips 5 --frames 48 --long 181 --noise-aug 0.1 --steps 10 \
    --tsv "$work/eval.tsv" ${EVAL_ARGS:-} | tee "$work/eval.txt"
