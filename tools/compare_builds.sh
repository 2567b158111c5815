#!/usr/bin/env bash
# Two builds of framechain side by side in one run: another checkout (BASE, say an older revision)
# against this one, on the same machine, device and config. Builds framechain and bench_ops in both
# with the same environment, then prints (1) the op-by-op table of each joined by op, with the
# ratio, and (2) each build's training speed line on the config. A benchmark, not a test.
#
# Usage (from the repository root): tools/compare_builds.sh BASE_DIR [DEVICE] [CONFIG] [STEPS]
#   BASE_DIR  a checkout of the revision to compare against, for instance
#               git worktree add /tmp/base REV      or      mkdir B && git archive REV | tar -x -C B
#   DEVICE    cpu, cuda or cuda-fp32 (default cuda)      CONFIG  default configs/starter.conf
#   STEPS     training steps for the speed line (default 12; the speed counts from the third)
# Environment: MAKE_JOBS (default nproc), MAKE_ARGS (for both builds: CUDA_ARCH=90, NO_CUDA=1, ...;
# make rebuilds what other arguments change (the flags are kept in BUILD/flags-*.txt); a BASE_DIR
# whose Makefile predates that needs make clean there when they change), LOG (folder for the logs,
# default out/compare), PAIRS (default 1: each build once; N > 1
# alternates them base, this, base, this, ... N times, for a noisy machine, and the table shows each
# op's median ms per step of either build and the median of the N pairs' ratios with its min-max),
# OPS_ARGS (more options for bench_ops, say --reps 8), TRAIN_PAIRS (default 1: the speed lines, alternating).
# Prebuilt (a GPU machine that compiles nothing): BASE_DIR a bundle folder holding framechain and
# bench_ops (tools/gpu_bundle.sh, built here from the base revision) and THIS_BUNDLE this build's
# (default build-gpu); nothing is built then, and CONFIG must be one both builds read (an older
# build refuses the keys added since: the base revision's own config, say).
set -u
usage="usage: tools/compare_builds.sh BASE_DIR [DEVICE] [CONFIG] [STEPS]"
case "${1:-}" in
    -h | --help) echo "$usage"; exit 0 ;;
    -*) echo "compare_builds: unknown option '$1'; $usage" >&2; exit 2 ;;
esac
[ $# -ge 1 ] && [ $# -le 4 ] || { echo "compare_builds: wants 1 to 4 arguments, not $#; $usage" >&2; exit 2; }
BASE=${1:?usage: tools/compare_builds.sh BASE_DIR [DEVICE] [CONFIG] [STEPS]}
DEV=${2:-cuda}
CFG=${3:-configs/starter.conf}
STEPS=${4:-12}
LOG=${LOG:-out/compare}
JOBS=${MAKE_JOBS:-$(nproc)}
. "$(dirname -- "$0")/checks.sh"
positive_whole compare_builds "STEPS=$STEPS" "PAIRS=${PAIRS:-1}" "TRAIN_PAIRS=${TRAIN_PAIRS:-1}" "MAKE_JOBS=$JOBS"
prebuilt=0
if [ -x "$BASE/framechain" ] && [ -x "$BASE/bench_ops" ] && [ ! -f "$BASE/Makefile" ]; then
    prebuilt=1
    THIS_BUNDLE=${THIS_BUNDLE:-build-gpu}
    [ -x "$THIS_BUNDLE/framechain" ] && [ -x "$THIS_BUNDLE/bench_ops" ] ||
        { echo "compare_builds: $BASE is a bundle, and THIS_BUNDLE ($THIS_BUNDLE) holds no framechain and bench_ops"; exit 2; }
fi
[ "$prebuilt" = 1 ] || { [ -f "$BASE/Makefile" ] && [ -d "$BASE/src" ]; } ||
    { echo "compare_builds: $BASE is neither a framechain checkout nor a bundle"; exit 2; }
[ -f "$CFG" ] || { echo "compare_builds: $CFG: no such config"; exit 2; }
mkdir -p "$LOG"
. tools/gpu_env.sh  # build/gpulibs, where the machine lacks OpenBLAS or zlib headers
HERE=$PWD
BASE=$(cd "$BASE" && pwd)
LOG=$(cd "$LOG" && pwd)
CFG=$(cd "$(dirname "$CFG")" && pwd)/$(basename "$CFG")

PAIRS=${PAIRS:-1}
if [ "$prebuilt" = 1 ]; then
    fc_base=$BASE/framechain ops_base=$BASE/bench_ops
    fc_this=$(cd "$THIS_BUNDLE" && pwd)/framechain ops_this=$(cd "$THIS_BUNDLE" && pwd)/bench_ops
    echo "== prebuilt: base $BASE, this $THIS_BUNDLE"
else
    fc_base=$BASE/framechain ops_base=$BASE/build/bench_ops fc_this=$HERE/framechain ops_this=$HERE/build/bench_ops
    for side in base this; do
        dir=$([ $side = base ] && echo "$BASE" || echo "$HERE")
        echo "== build ($side: $dir)"
        # shellcheck disable=SC2086  # MAKE_ARGS is a list of assignments
        (cd "$dir" && make -j"$JOBS" ${MAKE_ARGS:-} framechain build/bench_ops) > "$LOG/build-$side.log" 2>&1 ||
            { tail -20 "$LOG/build-$side.log"; exit 1; }
    done
fi
side_fc() { if [ "$1" = base ]; then echo "$fc_base"; else echo "$fc_this"; fi; }
side_ops() { if [ "$1" = base ]; then echo "$ops_base"; else echo "$ops_this"; fi; }
# bench_ops alternating, the config by absolute path: the base checkout may not have it
for r in $(seq "$PAIRS"); do
    for side in base this; do
        # shellcheck disable=SC2086  # OPS_ARGS is a list of options
        "$(side_ops $side)" --device "$DEV" --config "$CFG" ${OPS_ARGS:-} > "$LOG/ops-$side-$r.txt" 2>&1 ||
            { tail -5 "$LOG/ops-$side-$r.txt"; exit 1; }
    done
done
echo "== op by op ($DEV, $CFG): ms per step, base and this build, medians of $PAIRS run(s) each"
awk -v pairs="$PAIRS" -f "$HERE/tools/compare_ops.awk" $(for r in $(seq "$PAIRS"); do echo "$LOG/ops-base-$r.txt" "$LOG/ops-this-$r.txt"; done)
grep -h "^fc2's backward as the step" "$LOG/ops-this-1.txt"  # this build's fused op against its parts

echo "== training speed ($DEV, $CFG, $STEPS steps)"
for r in $(seq "${TRAIN_PAIRS:-1}"); do
    for side in base this; do
        rm -rf "$LOG/run"
        "$(side_fc $side)" --device "$DEV" train --config "$CFG" --run "$LOG/run" --steps "$STEPS" \
            --set warmup_steps=2 --set checkpoint_every=100000 --set keep_checkpoints=1 > "$LOG/train-$side-$r.log" 2>&1
        echo "$side: $(grep -E '^speed|^peak|rror' "$LOG/train-$side-$r.log" | tr '\n' ' ' | tr -s ' ')"
    done
done
rm -rf "$LOG/run"
