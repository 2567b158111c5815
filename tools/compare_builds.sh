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
# make does not rebuild what it built with other arguments: make clean in both first when they
# change), LOG (folder for the logs, default out/compare).
set -u
BASE=${1:?usage: tools/compare_builds.sh BASE_DIR [DEVICE] [CONFIG] [STEPS]}
DEV=${2:-cuda}
CFG=${3:-configs/starter.conf}
STEPS=${4:-12}
LOG=${LOG:-out/compare}
JOBS=${MAKE_JOBS:-$(nproc)}
[ -f "$BASE/Makefile" ] && [ -d "$BASE/src" ] || { echo "compare_builds: $BASE is not a framechain checkout"; exit 2; }
[ -f "$CFG" ] || { echo "compare_builds: $CFG: no such config"; exit 2; }
mkdir -p "$LOG"
. tools/gpu_env.sh  # build/gpulibs, where the machine lacks OpenBLAS or zlib headers
HERE=$PWD
BASE=$(cd "$BASE" && pwd)
LOG=$(cd "$LOG" && pwd)
CFG=$(cd "$(dirname "$CFG")" && pwd)/$(basename "$CFG")

for side in base this; do
    dir=$([ $side = base ] && echo "$BASE" || echo "$HERE")
    echo "== build ($side: $dir)"
    # shellcheck disable=SC2086  # MAKE_ARGS is a list of assignments
    (cd "$dir" && make -j"$JOBS" ${MAKE_ARGS:-} framechain build/bench_ops) > "$LOG/build-$side.log" 2>&1 ||
        { tail -20 "$LOG/build-$side.log"; exit 1; }
    # the config by absolute path: the base checkout may not have it
    (cd "$dir" && ./build/bench_ops --device "$DEV" --config "$CFG") > "$LOG/ops-$side.txt" 2>&1 ||
        { tail -5 "$LOG/ops-$side.txt"; exit 1; }
done

echo "== op by op ($DEV, $CFG): ms per call, base and this build"
awk '
    # rows of bench_ops: op name (several words), ms/call, x/step, ms/step, share
    function row(line, a, n, name, i) {
        n = split(line, a, /[ \t]+/)
        if (n < 5 || a[n] !~ /%$/) return ""
        name = a[1]; for (i = 2; i <= n - 4; i++) name = name " " a[i]
        return name SUBSEP a[n - 3] SUBSEP a[n - 1]
    }
    # Ops that one build has and the other lacks (fused or split since) get a "-" on the other side;
    # the sums are each whole table, so they compare the same block of work.
    FNR == NR { r = row($0); if (r != "") { split(r, f, SUBSEP); base[f[1]] = f[2]; tb += f[3]; order[++nb] = f[1] }
                next }
    { r = row($0); if (r == "") next; split(r, f, SUBSEP); tt += f[3]; seen[f[1]] = 1
      if (!(f[1] in base)) { printf "%-26s %10s %10.3f\n", f[1], "-", f[2]; next }
      printf "%-26s %10.3f %10.3f %7.2fx\n", f[1], base[f[1]], f[2], (f[2] > 0 ? base[f[1]] / f[2] : 0) }
    BEGIN { printf "%-26s %10s %10s %8s\n", "op", "base", "this", "speedup" }
    END { for (i = 1; i <= nb; i++) if (!(order[i] in seen)) printf "%-26s %10.3f %10s\n", order[i], base[order[i]], "-"
          printf "%-26s %10.2f %10.2f %7.2fx  (ms per step of each table)\n", "sum", tb, tt, (tt > 0 ? tb / tt : 0) }
' "$LOG/ops-base.txt" "$LOG/ops-this.txt"
grep -h "^the MLP's GELU fused" "$LOG/ops-this.txt"  # this build's fused ops against their parts

echo "== training speed ($DEV, $CFG, $STEPS steps)"
for side in base this; do
    dir=$([ $side = base ] && echo "$BASE" || echo "$HERE")
    rm -rf "$LOG/run"
    (cd "$dir" && ./framechain --device "$DEV" train --config "$CFG" --run "$LOG/run" --steps "$STEPS" \
        --set warmup_steps=2 --set checkpoint_every=100000 --set keep_checkpoints=1) > "$LOG/train-$side.log" 2>&1
    echo "$side: $(grep -E '^speed|^peak|rror' "$LOG/train-$side.log" | tr '\n' ' ' | tr -s ' ')"
done
rm -rf "$LOG/run"
