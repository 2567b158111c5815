#!/usr/bin/env bash
# The chain on real footage it did not train on: vtest.avi (opencv-doc) is split by time, frames
# 0-599 for training and 600-794 held out. The three small models train on the first part (plus
# Megamind.avi), then `framechain eval` starts from the held-out clips' real first frames and
# compares the chain with the real continuation (PSNR, SSIM, beside copying the first frame), and
# measures drift over a long generation, with noise augmentation off and on.
# Usage: tools/eval_real.sh [WORK_DIR]   (needs ffmpeg; EVAL_STEPS sets the training steps; a rerun
# goes on from the models it finds, and one with another EVAL_STEPS than theirs is refused at once)
# pipefail: a failing `framechain eval` is the pipeline's status, not tee's.
set -euo pipefail
usage="usage: tools/eval_real.sh [WORK_DIR]"
case "${1:-}" in
    -h | --help) echo "$usage"; exit 0 ;;
    -*) echo "eval_real: unknown option '$1'; $usage" >&2; exit 2 ;;
esac
[ $# -le 1 ] || { echo "eval_real: too many arguments; $usage" >&2; exit 2; }
root=$(cd -- "$(dirname -- "$0")/.." && pwd)  # the repository: its defaults below, wherever this runs from
FC=${FC:-$root/framechain}
STEPS=${EVAL_STEPS:-800}
. "$root/tools/checks.sh"
positive_whole eval_real "EVAL_STEPS=$STEPS"
work=${1:-$root/out/eval}
DATA_DIR=/usr/share/doc/opencv-doc/examples/data
# The folder is this script's: one it did not make (another script's, with its own train/ dataset) is
# refused, since making the datasets afresh removes train/ and heldout/. Its mark: .eval_real (or, in
# folders made before .eval_real was, train.json or vtest_train.mkv, its first file).
if [ -d "$work" ] && [ -n "$(ls -A -- "$work")" ] && [ ! -f "$work/.eval_real" ] && [ ! -f "$work/train.json" ] &&
    [ ! -f "$work/vtest_train.mkv" ]; then
    echo "eval_real: $work holds files this script did not make (no $work/.eval_real); give another folder" >&2
    exit 1
fi
# What the models under $work were trained with (in the mark, once they are): a rerun that asks for
# other steps is refused now, before any work, rather than by train after the data
trained_with="EVAL_STEPS=$STEPS"
trained_as eval_real "$work" .eval_real "$trained_with"
mkdir -p -- "$work"
touch "$work/.eval_real"
if [ ! -f "$work/train.json" ]; then
    ffmpeg -v error -y -i "$DATA_DIR/vtest.avi" -vf "select=lt(n\,600)" -vsync 0 -c:v ffv1 "$work/vtest_train.mkv"
    ffmpeg -v error -y -i "$DATA_DIR/vtest.avi" -vf "select=gte(n\,600)" -vsync 0 -c:v ffv1 "$work/vtest_heldout.mkv"
    rm -rf "$work/train" "$work/heldout"
    "$FC" prepare --input "$work/vtest_train.mkv" --input "$DATA_DIR/Megamind.avi" --out "$work/train" --size 32 \
        --clip-frames 32 --overlap 16
    "$FC" prepare --input "$work/vtest_heldout.mkv" --out "$work/heldout" --size 32 --clip-frames 48
    touch "$work/train.json"
fi
for role in starter extrapolate interpolate; do
    "$FC" train --config "$root/configs/small/$role.conf" --run "$work/$role" --data "$work/train" --steps "$STEPS" \
        --set checkpoint_every=200
done
echo "$trained_with" > "$work/.eval_real"
# The table becomes eval.txt once eval has finished: one interrupted or failed leaves the earlier table
# whole, beside the earlier eval.tsv (eval writes that through a temporary file too).
trap 'rm -f -- "$work/eval.txt.partial"' EXIT
"$FC" eval --starter "$work/starter" --extrapolate "$work/extrapolate" --interpolate "$work/interpolate" \
    --data "$work/heldout" --clips 4 --frames 48 --long 181 --noise-aug 0,0.1,0.3 --steps 10 --tsv "$work/eval.tsv" \
    --overwrite | tee "$work/eval.txt.partial"
mv -- "$work/eval.txt.partial" "$work/eval.txt"
