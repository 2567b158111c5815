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
# change), LOG (folder for the logs, default out/compare), PAIRS (default 1: each build once; N > 1
# alternates them base, this, base, this, ... N times, for a noisy machine, and the table shows each
# op's median ms per step of either build and the median of the N pairs' ratios with its min-max),
# OPS_ARGS (more options for bench_ops, say --reps 8), TRAIN_PAIRS (default 1: the speed lines, alternating).
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

PAIRS=${PAIRS:-1}
for side in base this; do
    dir=$([ $side = base ] && echo "$BASE" || echo "$HERE")
    echo "== build ($side: $dir)"
    # shellcheck disable=SC2086  # MAKE_ARGS is a list of assignments
    (cd "$dir" && make -j"$JOBS" ${MAKE_ARGS:-} framechain build/bench_ops) > "$LOG/build-$side.log" 2>&1 ||
        { tail -20 "$LOG/build-$side.log"; exit 1; }
done
# bench_ops alternating, the config by absolute path: the base checkout may not have it
for r in $(seq "$PAIRS"); do
    for side in base this; do
        dir=$([ $side = base ] && echo "$BASE" || echo "$HERE")
        # shellcheck disable=SC2086  # OPS_ARGS is a list of options
        (cd "$dir" && ./build/bench_ops --device "$DEV" --config "$CFG" ${OPS_ARGS:-}) > "$LOG/ops-$side-$r.txt" 2>&1 ||
            { tail -5 "$LOG/ops-$side-$r.txt"; exit 1; }
    done
done
echo "== op by op ($DEV, $CFG): ms per step, base and this build, medians of $PAIRS run(s) each"
awk -v pairs="$PAIRS" '
    # rows of bench_ops: op name (several words), ms/call, x/step, ms/step, share, rate (words)
    function row(line, a, n, name, i, s) {
        n = split(line, a, /[ \t]+/)
        for (s = 5; s <= n && a[s] !~ /^[0-9.]+%$/; s++) {}
        if (s > n) return ""
        name = a[1]; for (i = 2; i <= s - 4; i++) name = name " " a[i]
        return name SUBSEP a[s - 1]
    }
    function med(v, n,   i, j, t) {  # sorts v[1..n]; the median
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
        return (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
    }
    # ops-SIDE-PAIR.txt; ops that one build has and the other lacks (fused or split since) get a "-"
    # on the other side; the sums are each whole table, so they compare the same block of work.
    FNR == 1 { side = FILENAME; sub(/.*ops-/, "", side); k = side; sub(/-.*/, "", side); sub(/.*-/, "", k); sub(/[.]txt$/, "", k) }
    { r = row($0); if (r == "") next; split(r, f, SUBSEP)
      if (!((side, f[1]) in seen)) { seen[side, f[1]] = 1; if (side == "base" || !(("base", f[1]) in seen)) order[++no] = f[1] }
      ms[side, f[1], k] = f[2]; sum[side, k] += f[2] }
    function line(name, key,   i, b, t, q, n, mb, mt, mq) {
        n = 0
        for (i = 1; i <= pairs; i++) {
            if (!(("base", key, i) in ms) || !(("this", key, i) in ms)) continue
            n++; b[n] = ms["base", key, i]; t[n] = ms["this", key, i]; q[n] = t[n] > 0 ? b[n] / t[n] : 0
        }
        if (!n) { printf "%-26s %10s %10s\n", name, (("base", key, 1) in ms) ? ms["base", key, 1] : "-",
                                                   (("this", key, 1) in ms) ? ms["this", key, 1] : "-"; return }
        mb = med(b, n); mt = med(t, n); mq = med(q, n)
        printf "%-26s %10.3f %10.3f %7.2fx (%.2f-%.2f)\n", name, mb, mt, mq, q[1], q[n]
    }
    BEGIN { printf "%-26s %10s %10s %8s\n", "op", "base", "this", "speedup (min-max)" }
    END { for (i = 1; i <= no; i++) line(order[i], order[i])
          for (i = 1; i <= pairs; i++) { ms["base", "\001sum", i] = sum["base", i]; ms["this", "\001sum", i] = sum["this", i] }
          line("sum (each whole table)", "\001sum") }
' $(for r in $(seq "$PAIRS"); do echo "$LOG/ops-base-$r.txt" "$LOG/ops-this-$r.txt"; done)
cp "$LOG/ops-this-1.txt" "$LOG/ops-this.txt"
grep -h "^fc2's backward as the step" "$LOG/ops-this.txt"  # this build's fused op against its parts

echo "== training speed ($DEV, $CFG, $STEPS steps)"
for r in $(seq "${TRAIN_PAIRS:-1}"); do
    for side in base this; do
        dir=$([ $side = base ] && echo "$BASE" || echo "$HERE")
        rm -rf "$LOG/run"
        (cd "$dir" && ./framechain --device "$DEV" train --config "$CFG" --run "$LOG/run" --steps "$STEPS" \
            --set warmup_steps=2 --set checkpoint_every=100000 --set keep_checkpoints=1) > "$LOG/train-$side.log" 2>&1
        echo "$side: $(grep -E '^speed|^peak|rror' "$LOG/train-$side.log" | tr '\n' ' ' | tr -s ' ')"
    done
done
rm -rf "$LOG/run"
