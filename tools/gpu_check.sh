#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: build, run the CUDA backend's tests against the CPU backend, the
# kill -9 resume test on the GPU, and measure training speed and peak memory of the configs.
# Usage: tools/gpu_check.sh [LOG_DIR]   (logs and a summary go to LOG_DIR, default out/gpu)
#   BUNDLE=DIR runs the binaries of tools/gpu_bundle.sh DIR (built on another machine) instead of building
#   (a bundle built without MPI=1 has no MPI: PART=dist then runs the one-rank checks only).
#   PART=tests stops after the tests, PART=speed skips them, PART=dist runs only the ranks' path
#   (NCCL on one rank summing over itself; two ranks sharing the GPU with mpirun; fails where a run fails
#   or its final tensors are not the bytes they must be); SKIP_TRAIN_TEST=1 leaves out the
#   kill -9 test; PROFILE=1 adds an nsys kernel summary of the preset. With another checkout in
#   build/base (git archive REV | tar -x -C build/base), PART=speed ends with tools/compare_builds.sh
#   against it on the preset (MAKE_ARGS, e.g. CUDA_ARCH=90, is passed to both builds).
# MFU is the model FLOPs per second (train's "speed:" line) over the card's dense bf16 peak (table below).
# Works where only the CUDA toolkit, a C compiler, zlib and OpenBLAS are installed (no FFmpeg:
# video I/O is left out, training on the built-in shapes is enough for all of this).
set -u
usage="usage: tools/gpu_check.sh [LOG_DIR]"
case "${1:-}" in
    -h | --help) echo "$usage"; exit 0 ;;
    -*) echo "gpu_check: unknown option '$1'; $usage" >&2; exit 2 ;;
esac
[ $# -le 1 ] || { echo "gpu_check: too many arguments; $usage" >&2; exit 2; }
LOG=${1:-out/gpu}
mkdir -p "$LOG"
exec > >(tee "$LOG/summary.txt") 2>&1
tee_pid=$!
trap 'exec >&- 2>&-; wait "$tee_pid" 2> /dev/null' EXIT  # every line in summary.txt before this script ends
echo "== machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
nproc
if [ -n "${BUNDLE:-}" ]; then  # binaries built elsewhere by tools/gpu_bundle.sh: nothing to compile here
    echo "== bundle $BUNDLE"
    B=$BUNDLE
    case $B in /*) ;; *) B=$PWD/$B ;; esac  # relative to the checkout, or a path from /
    FC=$B/framechain
    export LD_LIBRARY_PATH=$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
else
    echo "== build"
    . tools/gpu_env.sh  # build/gpulibs, where the machine lacks OpenBLAS or zlib headers
    B=build FC=$PWD/framechain
    make -j"$(nproc)" framechain build/test_cuda build/bench_ops > "$LOG/build.log" 2>&1 || { tail -30 "$LOG/build.log"; exit 1; }
    grep 'framechain build' "$LOG/build.log"
fi
"$FC" --version
PART=${PART:-all}
if [ "$PART" = all ] || [ "$PART" = tests ]; then
echo "== make test-cuda"
BUILD=$B FRAMECHAIN=$FC tests/run_tests.sh --only cuda 2>&1 | tee "$LOG/test-cuda.log" | grep -E '^(FAIL|SKIP|INFO)|passed,' | head -40
grep -E '^PASS' "$LOG/test-cuda.log" | sed -E 's/.*rel err ([0-9.e+-]+).*/\1/' | sort -g | tail -1 | sed 's/^/worst rel err among PASS lines: /'
grep -q '^FAIL' "$LOG/test-cuda.log" && tests_failed=1  # this script's status says so (the pipe's is head's)
if grep -q '^SKIP cuda' "$LOG/test-cuda.log"; then  # on a GPU machine a skip is a failure (a library missing?)
    echo "gpu_check: the CUDA checks were skipped: $(grep -m1 '^SKIP cuda' "$LOG/test-cuda.log")"
    tests_failed=1
fi
if [ "${SKIP_TRAIN_TEST:-0}" != 1 ]; then
    echo "== kill -9 resume on the GPU (tests/train/test_train.sh, device auto = cuda)"
    tests/train/test_train.sh "$FC" > "$LOG/test-train.log" 2>&1
    grep -E '^(PASS|FAIL)' "$LOG/test-train.log"
    grep -q '^FAIL' "$LOG/test-train.log" && tests_failed=1
fi
fi
[ "$PART" = tests ] && exit "${tests_failed:-0}"
if [ "$PART" = all ] || [ "$PART" = dist ]; then
# The ranks' path on the GPU (docs/distributed.md): NCCL's calls, streams and events on one GPU by
# one rank summing over itself (FRAMECHAIN_TEST_COLLECTIVES_ALONE), each block's sum during the
# backward and one after it, against the plain run: the same bytes expected (a sum over one rank is
# itself). With mpirun, two ranks sharing the GPU through host memory and MPI (NCCL refuses ranks
# that share a GPU), during and after the backward: the same bytes; with two GPUs, NCCL between them.
echo "== the ranks' path on the GPU"
tensors() { local n; n=$(od -An -tu8 -N8 "$1" | tr -d ' '); tail -c +$((9 + n)) "$1" | md5sum | cut -c1-12; }
DARGS=(--config configs/small/starter.conf --steps 8 --set warmup_steps=2 --set checkpoint_every=8)
# dist NAME "LAUNCHER" SAME_AS [train options...]: one run (LAUNCHER: "env VAR=VALUE ..." or "mpirun
# -np N"), its final tensors, which must be the bytes of run SAME_AS's ("-": the first of its kind);
# a run that fails or differs fails this part
declare -A hashes
dist() {
    local name=$1 launcher=$2 same=$3 h ranks
    shift 3
    rm -rf "$LOG/d-$name"
    if $launcher "$FC" --device cuda train "${DARGS[@]}" --run "$LOG/d-$name" "$@" > "$LOG/dist-$name.log" 2>&1; then
        h=$(tensors "$LOG/d-$name/ckpt-00000008.safetensors")
        hashes[$name]=$h
        ranks=$(grep -m1 '^ranks:' "$LOG/dist-$name.log" | cut -d';' -f1)
        echo "$name: ${ranks:-one rank}; final tensors" \
            "$h; $(grep -m1 '^speed' "$LOG/dist-$name.log" | cut -d, -f1)"
        if [ "$same" != - ] && [ "$h" != "${hashes[$same]:-}" ]; then
            echo "$name: FAIL: its final tensors are not $same's (${hashes[$same]:-not made})"
            dist_failed=1
        fi
    else
        echo "$name: FAILED: $(grep -m1 '^framechain: ' "$LOG/dist-$name.log" || tail -1 "$LOG/dist-$name.log")"
        dist_failed=1
    fi
}
alone="env FRAMECHAIN_TEST_COLLECTIVES_ALONE=1"
dist plain env -
dist nccl-alone "$alone" plain --set collectives=nccl
dist nccl-alone-after "$alone" plain --set collectives=nccl --set overlap_grads=0
dist mpi-alone "$alone" plain --set collectives=mpi
if command -v mpirun > /dev/null && "$FC" --version | grep -q '^  MPI'; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
    dist two-mpi "mpirun -np 2" - --set collectives=mpi
    dist two-mpi-after "mpirun -np 2" two-mpi --set collectives=mpi --set overlap_grads=0
    if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
        dist two-nccl "mpirun -np 2" - --set collectives=nccl
        dist two-nccl-after "mpirun -np 2" two-nccl --set collectives=nccl --set overlap_grads=0
    fi
else
    echo "(no mpirun, or framechain built without MPI: two ranks not run)"
fi
rm -rf "$LOG"/d-*
[ "$PART" = dist ] && exit "${dist_failed:-0}"
fi
# The card's dense bf16 tensor-core peak in TFLOP/s (fp32 accumulation), by name.
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$gpu" in
    *H100*PCIe*) peak=756 ;; *H100*|*H200*|*GH200*) peak=989 ;; *A100*) peak=312 ;;
    *4090*) peak=165 ;; *3090*) peak=71 ;; *) peak=0 ;;
esac
echo "== training speed and peak memory ($gpu, bf16 peak ${peak} TFLOP/s)"
# speed NAME DEVICE CONFIG STEPS [train options]: one timed run; the plan, the steady rate, MFU, the peak
speed() {
    local name=$1 dev=$2 cfg=$3 steps=$4
    shift 4
    rm -rf "$LOG/run"
    "$FC" --device "$dev" train --config "$cfg" --run "$LOG/run" --steps "$steps" --set warmup_steps=2 \
        --set checkpoint_every=100000 --set keep_checkpoints=1 "$@" > "$LOG/train-$name-$dev.log" 2>&1
    local tf mfu
    tf=$(sed -nE 's/^speed: .* ([0-9.]+) TFLOP\/s$/\1/p' "$LOG/train-$name-$dev.log")
    mfu=$(awk -v t="${tf:-0}" -v p="$peak" 'BEGIN { if (p > 0) printf "%.1f%%", 100 * t / p; else print "?" }')
    echo "$name $dev: $(grep -E '^  total|EXCEEDS|^speed|^peak|rror' "$LOG/train-$name-$dev.log" | tail -4 | tr '\n' ' ' | tr -s ' ') MFU $mfu"
}
for dev in cuda cuda-fp32; do
    speed tiny $dev configs/tiny/starter.conf 300
    speed small $dev configs/small/starter.conf 300
    speed small-batch16 $dev configs/small/starter.conf 100 --set batch_size=16
    speed preset $dev configs/starter.conf 12
done
speed preset-no-recompute cuda configs/starter.conf 12 --vram-budget 75 --set recompute=0
speed preset-keep0 cuda configs/starter.conf 12 --set keep_blocks=0
speed preset-recompute1 cuda configs/starter.conf 12 --set recompute=1 --set keep_blocks=0
speed preset-batch2 cuda configs/starter.conf 12 --set batch_size=2 --set keep_blocks=0
speed largest-depth22 cuda configs/starter.conf 8 --set depth=22 --set recompute=1 --set keep_blocks=0
echo "== checkpoints of the preset: training blocked, background write against synchronous"
for mode in async sync; do
    rm -rf "$LOG/run"
    "$FC" --device cuda train --config configs/starter.conf --run "$LOG/run" --steps 6 --set warmup_steps=2 \
        --set checkpoint_every=3 --set keep_checkpoints=1 $([ $mode = sync ] && echo --sync-checkpoints) \
        > "$LOG/ckpt-$mode.log" 2>&1
    echo "$mode: $(grep -E '^checkpoint|^speed|rror' "$LOG/ckpt-$mode.log" | tr '\n' ' ' | tr -s ' ')"
done
echo "== where a step's time goes, op by op (make bench-ops)"
"$B/bench_ops" --device cuda | tee "$LOG/bench-ops.txt" | tail -25
if [ "${PROFILE:-0}" = 1 ] && command -v nsys > /dev/null; then
    echo "== nsys: where a preset step's GPU time goes (bf16)"
    rm -rf "$LOG/run"
    nsys profile -o "$LOG/preset" --force-overwrite true "$FC" --device cuda train --config configs/starter.conf \
        --run "$LOG/run" --steps 4 > "$LOG/nsys.log" 2>&1  # the default 24 GiB budget: the preset's kept blocks
    nsys stats --report cuda_gpu_kern_sum --format csv "$LOG/preset.nsys-rep" 2> /dev/null |
        awk -F'","' 'NR > 1 { printf "%6s%%  %s\n", $1, substr($NF, 1, 90) }' | sed 's/"//g' | head -20
    rm -f "$LOG/preset.nsys-rep" "$LOG/preset.sqlite"
fi
rm -rf "$LOG/run"
if [ -f build/base/Makefile ]; then
    echo "== this build against build/base, op by op and the preset's step (tools/compare_builds.sh)"
    # the preset with recompute = 1 and no kept blocks, which any base revision reads (2 and
    # keep_blocks came later)
    sed -E 's/^recompute *= *2/recompute  = 1/; /^keep_blocks/d' configs/starter.conf > "$LOG/starter-recompute1.conf"
    LOG="$LOG/compare" tools/compare_builds.sh build/base cuda "$LOG/starter-recompute1.conf"
fi
exit $((${tests_failed:-0} | ${dist_failed:-0}))
