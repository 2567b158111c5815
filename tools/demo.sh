#!/usr/bin/env bash
# make demo: from nothing to out/demo.mp4 and out/demo.gif (181 frames) on the embedded default.
# Makes a small dataset (the opencv-doc sample videos where they are installed, else the built-in
# moving shapes), trains the three small models (configs/small/) for a few minutes each on the GPU
# when there is one, else the CPU, and chains them from one first frame. Rerunning resumes: the
# runs under out/demo/ continue from their checkpoints, a finished one is skipped (runs of other
# configs, footage or DEMO_STEPS are moved aside, below).
# Environment: DEMO_STEPS, training steps a model (default 800); DEMO_OUT, the output folder (default
# the repository's out/, wherever the script runs from); DEMO_DATA_DIR, opencv-doc's data folder
# (default /usr/share/doc/opencv-doc/examples/data); FC, the framechain (default the repository's).
set -eu
usage="usage: tools/demo.sh"
case "${1:-}" in
    -h | --help) echo "$usage"; exit 0 ;;
    ?*) echo "demo: takes no arguments (the environment sets its options); $usage" >&2; exit 2 ;;
esac
[ $# -eq 0 ] || { echo "demo: takes no arguments; $usage" >&2; exit 2; }
root=$(cd -- "$(dirname -- "$0")/.." && pwd)  # the repository: its framechain, configs/ and out/
FC=${FC:-$root/framechain}
STEPS=${DEMO_STEPS:-800}
. "$root/tools/checks.sh"
positive_whole demo "DEMO_STEPS=$STEPS"
OUT=${DEMO_OUT:-$root/out}
case $OUT in -*) OUT=./$OUT ;; esac  # a folder named like an option is still a folder to mkdir, mv and train
DATA_DIR=${DEMO_DATA_DIR:-/usr/share/doc/opencv-doc/examples/data}
work="$OUT/demo"
real=0  # the footage: the opencv-doc sample videos where they are installed, else the built-in shapes
[ -f "$DATA_DIR/vtest.avi" ] && [ -f "$DATA_DIR/Megamind.avi" ] && real=1
# Runs continue only their own config, footage and steps (train refuses a checkpoint of the shapes
# on a dataset, and the other way round, and one written for another count of steps): when
# configs/small/ changed since the runs under $work were started, or the footage did (opencv-doc
# installed or removed since), or DEMO_STEPS, they are moved aside (to $work.previous-N, nothing
# deleted) and the demo starts afresh. What they were started with is in $work: configs.cksum,
# footage and steps (runs of a demo before the last two were written: footage from $work/data,
# steps not compared).
stamp=$(cat "$root"/configs/small/*.conf | cksum | cut -d' ' -f1)
footage=shapes
[ $real = 1 ] && footage=videos
if [ -d "$work/starter" ]; then
    trained_on=$(cat "$work/footage" 2>/dev/null) || { trained_on=shapes; [ -f "$work/data/dataset.json" ] && trained_on=videos; }
    trained_steps=$(cat "$work/steps" 2>/dev/null) || trained_steps=$STEPS
    why=""
    if [ "$(cat "$work/configs.cksum" 2>/dev/null)" != "$stamp" ]; then
        why="configs/small/ changed since $work was trained"
    elif [ "$trained_on" = shapes ] && [ $real = 1 ]; then
        why="$work was trained on the built-in moving shapes, and the opencv-doc sample videos are there now"
    elif [ "$trained_on" = videos ] && [ $real = 0 ]; then
        why="$work was trained on the opencv-doc sample videos, which are not in $DATA_DIR now"
    elif [ "$trained_steps" != "$STEPS" ]; then
        why="$work was trained for DEMO_STEPS=$trained_steps, and this demo asks for $STEPS"
    fi
    if [ -n "$why" ]; then
        n=1
        while [ -e "$work.previous-$n" ]; do n=$((n + 1)); done
        mv -- "$work" "$work.previous-$n"
        echo "demo: $why: moved it to $work.previous-$n"
    fi
fi
mkdir -p -- "$work"
echo "$stamp" > "$work/configs.cksum"
echo "$footage" > "$work/footage"
echo "$STEPS" > "$work/steps"
start=$(date +%s)
say() { printf '\n== demo [%dm%02ds] %s\n' $(( ($(date +%s) - start) / 60 )) $(( ($(date +%s) - start) % 60 )) "$*"; }

data_args=()
first=shapes:3
if [ $real = 1 ]; then
    if [ ! -f "$work/data/dataset.json" ]; then
        say "preparing real footage: vtest.avi and Megamind.avi at 32x32, clips of 32 frames"
        "$FC" prepare --input "$DATA_DIR/vtest.avi" --input "$DATA_DIR/Megamind.avi" --out "$work/data" \
            --size 32 --clip-frames 32 --overlap 16
    fi
    data_args=(--data "$work/data")
    first="$DATA_DIR/vtest.avi"
else
    say "the opencv-doc sample videos are not installed: training on the built-in moving shapes"
fi

for role in starter extrapolate interpolate; do
    say "training the $role model ($STEPS steps, configs/small/$role.conf)"
    "$FC" train --config "$root/configs/small/$role.conf" --run "$work/$role" "${data_args[@]}" --steps "$STEPS" \
        --set checkpoint_every=200
done

say "generating 181 frames from the first frame of $first"
runs=(--starter "$work/starter" --extrapolate "$work/extrapolate" --interpolate "$work/interpolate")
# --overwrite: a demo before this one stays until the new video is whole (a failed or stopped generate
# leaves it as it was)
"$FC" generate "${runs[@]}" --first-frame "$first" --frames 181 --out "$OUT/demo.mp4" --overwrite
"$FC" generate "${runs[@]}" --first-frame "$first" --frames 181 --out "$OUT/demo.gif" --overwrite --quiet
say "done: $OUT/demo.mp4 and $OUT/demo.gif (181 frames each)"
