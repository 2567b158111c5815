#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: build, run the CUDA backend's tests against the CPU backend, the
# kill -9 resume test on the GPU, and measure training speed and peak memory of the configs.
# Usage: tools/gpu_check.sh [LOG_DIR]   (logs and a summary go to LOG_DIR, default out/gpu)
# Works where only the CUDA toolkit, a C compiler, zlib and OpenBLAS are installed (no FFmpeg:
# video I/O is left out, training on the built-in shapes is enough for all of this).
set -u
LOG=${1:-out/gpu}
mkdir -p "$LOG"
exec > >(tee "$LOG/summary.txt") 2>&1
echo "== machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
nproc
echo "== build"
# Headers or libraries the machine lacks can come along in build/gpulibs (include/, lib/).
if [ -d build/gpulibs ]; then
    [ -e build/gpulibs/lib/libopenblas.so ] || ln -sf libopenblas.so.0 build/gpulibs/lib/libopenblas.so
    for h in cblas.h zlib.h; do
        if ! echo "#include <$h>" | cc -E - > /dev/null 2>&1; then
            echo "using build/gpulibs for $h"
            export C_INCLUDE_PATH=$PWD/build/gpulibs/include LIBRARY_PATH=$PWD/build/gpulibs/lib
            export LD_LIBRARY_PATH=$PWD/build/gpulibs/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
        fi
    done
fi
make -j"$(nproc)" framechain build/test_cuda > "$LOG/build.log" 2>&1 || { tail -30 "$LOG/build.log"; exit 1; }
grep 'framechain build' "$LOG/build.log"
./framechain --version
echo "== make test-cuda"
make test-cuda 2>&1 | tee "$LOG/test-cuda.log" | grep -E '^(FAIL|SKIP|INFO)|passed,' | head -40
grep -E '^PASS' "$LOG/test-cuda.log" | sed -E 's/.*rel err ([0-9.e+-]+).*/\1/' | sort -g | tail -1 | sed 's/^/worst rel err among PASS lines: /'
echo "== kill -9 resume on the GPU (tests/test_train.sh, device auto = cuda)"
tests/test_train.sh ./framechain > "$LOG/test-train.log" 2>&1
grep -E '^(PASS|FAIL)' "$LOG/test-train.log"
echo "== training speed and peak memory (cuda)"
# speed NAME CONFIG STEPS [train options]: one timed run; the plan, the rate and the measured peak
speed() {
    local name=$1 cfg=$2 steps=$3
    shift 3
    rm -rf "$LOG/run"
    ./framechain --device cuda train --config "$cfg" --run "$LOG/run" --steps "$steps" --set warmup_steps=2 \
        --set checkpoint_every=100000 "$@" > "$LOG/train-$name.log" 2>&1
    echo "$name: $(grep -E 'total|budget|steps/s|peak|exceeds|error' "$LOG/train-$name.log" | tail -5 | tr '\n' ' ' | tr -s ' ')"
}
speed tiny configs/tiny/starter.conf 300
speed small configs/small/starter.conf 300
speed small-batch16 configs/small/starter.conf 100 --set batch_size=16
speed preset-24GiB-budget configs/starter.conf 5
speed preset-75GiB-budget configs/starter.conf 8 --vram-budget 75
rm -rf "$LOG/run"
