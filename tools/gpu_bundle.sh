#!/usr/bin/env bash
# A GPU bundle: framechain, test_cuda and bench_ops built on this machine for a GPU machine that has
# the NVIDIA driver and the CUDA toolkit's libraries but not OpenBLAS or FFmpeg (a bare GPU server),
# with the shared libraries it lacks in DIR/lib. The target needs a glibc no older than this
# machine's. No video or image I/O (NO_FFMPEG: training on the built-in shapes or on shards
# prepared here works). What to copy there: DIR/framechain, DIR/libframechain_cuda.so (the CUDA backend,
# which framechain opens from beside itself), DIR/test_cuda, DIR/bench_ops, DIR/lib,
# beside a checkout of the same revision; there, `BUNDLE=DIR tools/gpu_check.sh` runs the checks
# without compiling anything.
# The bundle is built without MPI (NO_MPI=1: a framechain linked to libmpi would not start where Open
# MPI is not installed), unless MPI=1: then the target needs Open MPI 4 (libmpi.so.40, mpirun), and
# the two-rank checks of gpu_check.sh run there. NCCL is kept where this toolkit has it, and the last
# line says when the target then needs libnccl.so.2 (NO_NCCL=1 leaves it out: the ranks' path then
# goes through host memory).
# usage: tools/gpu_bundle.sh [DIR]   (default build-gpu; CUDA_ARCH, default 90: H100/H200; 89: RTX 4090; 86: RTX 3090)
set -eu
usage="usage: tools/gpu_bundle.sh [DIR]"
case "${1:-}" in
    -h | --help) echo "$usage"; exit 0 ;;
    -*) echo "gpu_bundle: unknown option '$1'; $usage" >&2; exit 2 ;;
esac
[ $# -le 1 ] || { echo "gpu_bundle: too many arguments; $usage" >&2; exit 2; }
DIR=${1:-build-gpu}
mkdir -p "$DIR/lib"
make BUILD="$DIR" BIN="$DIR/framechain" CUDA_ARCH="${CUDA_ARCH:-90}" NO_FFMPEG=1 NO_MPI="$([ "${MPI:-0}" = 1 ] && echo 0 || echo 1)" NO_NCCL="${NO_NCCL:-}" \
    -j"$(nproc)" "$DIR/framechain" "$DIR/test_cuda" "$DIR/bench_ops" > "$DIR/build.log" 2>&1 || { tail -20 "$DIR/build.log"; exit 1; }
# OpenBLAS and what it loads (Fortran runtime); the C library, libstdc++, OpenMP and CUDA are there
ldd "$DIR/framechain" | awk '/=> \// {print $3}' | grep -E 'openblas|gfortran|quadmath' |
    while read -r lib; do cp -L "$lib" "$DIR/lib/"; done
# the commit it was built from, "+changes" when the tree had uncommitted ones (gpu_run.sh prints it)
rev=$(git rev-parse --short HEAD 2> /dev/null || echo unknown)
git diff --quiet HEAD 2> /dev/null || rev="$rev+changes"
echo "$rev" > "$DIR/REVISION"
echo "bundle $DIR: $(du -ch "$DIR/framechain" "$DIR/libframechain_cuda.so" "$DIR/test_cuda" "$DIR/bench_ops" "$DIR/lib" | tail -1 | cut -f1)"
ls "$DIR/lib"
if ldd "$DIR/libframechain_cuda.so" | grep -q libnccl; then
    echo "the CUDA backend needs libnccl.so.2 on the target (as here: $(ldd "$DIR/libframechain_cuda.so" | awk '/libnccl/ {print $3}')); NO_NCCL=1 builds it without"
fi
