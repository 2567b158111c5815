#!/usr/bin/env bash
# One call on a lent GPU machine, within a time budget: unpack a bundle built elsewhere, then run the
# chosen parts in order, each bounded by its own cap and by what is left of the budget, with logs
# under LOG_DIR (a tar of them at LOG_DIR.tgz, without checkpoints).
#
# Here, before the call (a machine with the CUDA toolkit):
#   MPI=1 tools/gpu_bundle.sh build-gpu
#   mkdir -p build-carry && tar -cJf build-carry/bundle.txz build-gpu/framechain build-gpu/libframechain_cuda.so \
#       build-gpu/test_cuda build-gpu/bench_ops build-gpu/lib build-gpu/REVISION
# (REVISION: the commit the bundle was built from, which this script prints: a bundle older than the
# checkout's last CUDA change shows there. Every call unpacks the carried bundles afresh, as a warm
# machine keeps the folders of the call before.)
# and, in case the GPU machine has no Open MPI 4, the same without MPI as build-carry/bundle-nompi.txz
# (`tools/gpu_bundle.sh build-gpu-nompi`, its four files, lib/ and REVISION under build-gpu-nompi/); then
# carry build-carry (and, for the eval64 part, out/eval64/train, out/eval64/real, out/eval64/shapes and
# out/eval64/shapes48: its default sets; the pans' 40 MB would not fit beside the bundle) to the GPU
# machine and run there:
#   BUDGET=555 tools/gpu_run.sh /tmp/logs; cp /tmp/logs.tgz /tmp/logs/summary.txt $OUT/
#
# Parts (PARTS, in the order given; default "tests train compare pairs", compare left out without a
# base bundle: by 2026-11-29's times on an H200, the machine's start about 30 s, unpacking 12 s, tests
# 57 s, the kill -9 test at most 150 s, compare about 270 s at 3 pairs, pairs 261 s at 4 pairs
# (PyTorch ready in 135 s of it), routes about 180 s a set of routes at 3 pairs, the loss 101 s;
# whatever the budget cuts goes to a second call right after, with the same LOG_DIR, so that pairs
# finds the outputs of routes and loss, when they ran, that the first call left there:
# PARTS="pairs" BUDGET=... tools/gpu_run.sh /tmp/logs):
#   tests   make test-cuda (tools/gpu_check.sh PART=tests, without the kill -9 test)
#   train   the kill -9 resume test on the GPU (tests/train/test_train.sh)
#   dist    the ranks' path (tools/gpu_check.sh PART=dist)
#   routes  each route against the default, alternating (tools/bench_routes.sh; ROUTES, ROUTE_PAIRS, default 3)
#   loss    the training loss with a route against the defaults (tools/route_loss.sh; LOSS_ROUTE, default
#           fp8_fwd,fp8_dgrad,fp8_wgrad, LOSS_STEPS, default 200)
#   pairs   framechain against PyTorch torch.compile with checkpointing, alternating (tools/bench_cuda.sh PAIRS,
#           default 5; PyTorch compiles once); framechain with the routes that routes and loss, earlier
#           in the same call, found faster in every pair and (fp8) training as before (tools/route_winners.sh),
#           or with PAIR_ROUTES (FRAMECHAIN_CUDA_ROUTES's form; empty: the defaults)
#   bench   make bench-cuda's rows (FC_RUNS, PT_RUNS)
#   compare this bundle against build-base, a bundle of another revision (unpacked from
#           build-carry/bundle-base.txz, made here: `git worktree add /tmp/base REV && (cd /tmp/base &&
#           tools/gpu_bundle.sh build-base && cp configs/starter.conf build-base/ && git rev-parse HEAD >
#           build-base/REVISION) && tar -C /tmp/base -cJf build-carry/bundle-base.txz build-base/framechain
#           build-base/libframechain_cuda.so build-base/bench_ops build-base/starter.conf build-base/REVISION`), op by op and the base's preset's step, alternating (tools/compare_builds.sh;
#           COMPARE_PAIRS, default 3): whether a change of the code or the card moved the step
#   ops     bench_ops at the preset
#   ae      the SD VAE against PyTorch (tools/bench_autoencoder.sh)
#   eval64  the quality table of configs/eval64 (tools/eval_unseen.sh; EVAL_SETS; needs out/eval64's
#           datasets prepared elsewhere: this machine may have no FFmpeg). Without EVAL_STEPS, each
#           model trains as many steps as the budget holds: a 12-step probe of the starter times a
#           step (at most 120 s; without its speed line, 600 steps a model), and EVAL_RESERVE seconds
#           (default 150) are kept for the chains' scoring.
#           EVAL_CONFIGS and EVAL_DIR (default configs/eval64, out/eval64) try it with other models
# CONFIG (default configs/starter.conf, the 24 GB preset) is the network of pairs, routes, loss and bench.
set -u
usage="usage: tools/gpu_run.sh [LOG_DIR]"
case "${1:-}" in
    -h | --help) echo "$usage"; exit 0 ;;
    -*) echo "gpu_run: unknown option '$1'; $usage" >&2; exit 2 ;;
esac
[ $# -le 1 ] || { echo "gpu_run: too many arguments; $usage" >&2; exit 2; }
T0=$(date +%s)
LOG=${1:-out/gpu-run}
mkdir -p "$LOG"
exec > >(tee "$LOG/summary.txt") 2>&1
tee_pid=$!
trap 'exec >&- 2>&-; wait "$tee_pid" 2> /dev/null' EXIT  # every line in summary.txt before this script ends
left() { echo $((${BUDGET:-540} - ($(date +%s) - T0))); }
step() { # step NAME CAP command...: at most CAP seconds, less where the budget is short
    local name=$1 cap=$2 t s
    shift 2
    t=$(($(left) - 10))
    [ "$t" -gt "$cap" ] && t=$cap
    if [ "$t" -lt 20 ]; then
        echo "== $name: skipped ($(left) s left)"
        return
    fi
    echo "== $name (at most $t s; $(($(date +%s) - T0)) s in)"
    s=$(date +%s)
    timeout -k 5 "$t" "$@"
    echo "== $name: rc $? in $(($(date +%s) - s)) s"
}
# eval64_steps LEFT RESERVE MS: training steps a model for three models in LEFT - RESERVE seconds at MS
# ms a step, in hundreds (at least 100; 600 without a speed)
eval64_steps() {
    awk -v l="$1" -v r="$2" -v ms="$3" 'BEGIN { s = ms > 0 ? int((l - r) * 1000 / ms / 3 / 100) * 100 : 600
                                              print s < 100 ? 100 : s }'
}
date -u
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
BUNDLE=${BUNDLE:-build-gpu}
if [ "$BUNDLE" = build-gpu ] && [ -f build-carry/bundle.txz ]; then  # afresh: not the last call's
    rm -rf build-gpu build-gpu-nompi build-base
    tar -xJf build-carry/bundle.txz || { echo "gpu_run: build-carry/bundle.txz does not unpack"; exit 1; }
fi
[ -x "$BUNDLE/framechain" ] || { echo "gpu_run: no bundle ($BUNDLE, build-carry/bundle.txz)"; exit 1; }
echo "bundle: $BUNDLE, built from $(cat "$BUNDLE/REVISION" 2> /dev/null || echo "an unknown revision (no REVISION)")"
nccl=$(find /usr /opt -name 'libnccl.so.2' 2> /dev/null | head -1)
export LD_LIBRARY_PATH=${nccl:+$(dirname "$nccl"):}/usr/local/cuda/lib64:$PWD/$BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# mpirun as root inside a container, over shared memory
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader
export OMPI_MCA_mca_base_component_show_load_errors=0
FC=$PWD/$BUNDLE/framechain
if ! "$FC" --version > /dev/null 2>&1 && [ -f build-carry/bundle-nompi.txz ]; then
    "$FC" --version 2>&1 | head -2
    tar -xJf build-carry/bundle-nompi.txz && cp -r build-gpu-nompi/. "$BUNDLE"/ &&
        echo "gpu_run: the MPI build does not start here: the bundle without MPI (no two-rank checks)"
fi
"$FC" --version || { echo "gpu_run: $FC does not start (a bundle built with MPI=1 needs Open MPI 4)"; exit 1; }
PY=$(for p in python3 /usr/bin/python3; do $p -c 'import torch' 2> /dev/null && echo $p && break; done)
[ -n "$PY" ] && $PY -c 'import torch; print("torch", torch.__version__)'
for part in ${PARTS:-tests train compare pairs}; do
    case $part in
    tests) step test-cuda 200 env BUNDLE="$BUNDLE" PART=tests SKIP_TRAIN_TEST=1 tools/gpu_check.sh "$LOG/tests" ;;
    train) step kill9 150 sh -c "tests/train/test_train.sh '$FC' > '$LOG/test-train.log' 2>&1"
        grep -E '^(PASS|FAIL)' "$LOG/test-train.log" | cut -c1-160 ;;
    dist) step dist 90 env BUNDLE="$BUNDLE" PART=dist tools/gpu_check.sh "$LOG/dist" ;;
    routes) step routes 360 bash -c "set -o pipefail; env FC='$FC' BENCH_OPS='$BUNDLE/bench_ops' PAIRS='${ROUTE_PAIRS:-3}' \
        tools/bench_routes.sh '$LOG/routes' | tee '$LOG/routes.txt'" ;;
    loss) step route-loss 150 bash -c "set -o pipefail; env FC='$FC' ROUTE='${LOSS_ROUTE:-fp8_fwd,fp8_dgrad,fp8_wgrad}' \
        STEPS='${LOSS_STEPS:-200}' CONFIG='${CONFIG:-configs/starter.conf}' tools/route_loss.sh '$LOG/loss' | tee '$LOG/loss.txt'" ;;
    pairs) won=""  # the routes this call measured faster (and, for fp8, training as before), unless PAIR_ROUTES says
        [ -f "$LOG/routes.txt" ] && won=$(tools/route_winners.sh "$LOG/routes.txt" "$LOG/loss.txt")
        routes_on=${PAIR_ROUTES-$won}
        echo "pairs: framechain with ${routes_on:-the default routes}${routes_on:+ on}"
        step pairs 360 env ${routes_on:+FRAMECHAIN_CUDA_ROUTES=$routes_on} FC="$FC" PYTHON="$PY" PAIRS="${PAIRS:-5}" \
            FC_RUNS=2:auto PT_RUNS="--compile --checkpointing" CKPT=0 tools/bench_cuda.sh "$LOG/pairs" ${CONFIG:+"$CONFIG"} ;;
    bench) step bench-cuda 230 env FC="$FC" PYTHON="$PY" FC_RUNS="${FC_RUNS:-2:auto 2:0 0:0}" \
        PT_RUNS="${PT_RUNS-eager,--checkpointing,--compile,--compile --checkpointing}" CKPT=0 \
        tools/bench_cuda.sh "$LOG/bench" ${CONFIG:+"$CONFIG"} ;;
    compare) [ -x build-base/framechain ] || { [ -f build-carry/bundle-base.txz ] && tar -xJf build-carry/bundle-base.txz; } ||
            { echo "gpu_run: compare: no build-base (build-carry/bundle-base.txz)"; continue; }
        echo "compare: base built from $(cat build-base/REVISION 2> /dev/null || echo "an unknown revision")"
        step compare 300 env THIS_BUNDLE="$BUNDLE" LOG="$LOG/compare" PAIRS="${COMPARE_PAIRS:-3}" \
            TRAIN_PAIRS="${COMPARE_PAIRS:-3}" tools/compare_builds.sh build-base cuda build-base/starter.conf ;;
    ops) step bench-ops 60 sh -c "'$BUNDLE/bench_ops' --device cuda > '$LOG/bench-ops.txt' 2>&1"
        tail -28 "$LOG/bench-ops.txt" ;;
    ae) step autoencoder 90 env FC="$FC" DEVICE=cuda INPUT=shapes:0 FRAMES=4 PAIRS=5 PYTHON="$PY" tools/bench_autoencoder.sh
        cp out/bench/ae_fc.log out/bench/ae_pt.log "$LOG/" 2> /dev/null ;;
    eval64) cfg=${EVAL_CONFIGS:-configs/eval64} dir=${EVAL_DIR:-out/eval64} steps=${EVAL_STEPS:-}
        if [ -z "$steps" ]; then  # as many steps as the budget holds, from a 12-step probe's speed line
            rm -rf "$dir/probe"
            timeout -k 5 120 "$FC" train --config "$cfg/starter.conf" --run "$dir/probe" --data "$dir/train" --steps 12 \
                --set checkpoint_every=100000 --set sample_every=0 > "$LOG/eval64-probe.log" 2>&1
            ms=$(sed -nE 's/^speed: ([0-9.]+) ms per step.*/\1/p' "$LOG/eval64-probe.log")
            steps=$(eval64_steps "$(left)" "${EVAL_RESERVE:-150}" "${ms:-0}")
            echo "eval64: the probe ${ms:-(no speed line: $LOG/eval64-probe.log)} ms a step; $steps steps a model"
            rm -rf "$dir/probe"
        fi
        step eval64 "$(left)" env FC="$FC" EVAL_CONFIGS="$cfg" EVAL_STEPS="$steps" \
            EVAL_SETS="${EVAL_SETS:-real shapes}" tools/eval_unseen.sh "$dir"
        cp "$dir"/*.txt "$LOG/" 2> /dev/null ;;
    *) echo "gpu_run: unknown part '$part'" ;;
    esac
done
tar -czf "$LOG.tgz" --exclude='*.safetensors' --exclude='d-*' --exclude=run -C "$(dirname "$LOG")" "$(basename "$LOG")"
echo "done in $(($(date +%s) - T0)) s"
