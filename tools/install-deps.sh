#!/bin/sh
# Install what framechain needs from Debian/Ubuntu packages, skipping what is already there.
#   tools/install-deps.sh          to build and run framechain
#   tools/install-deps.sh --demo   also the sample videos make demo trains on (opencv-doc)
#   tools/install-deps.sh --test   also what the test suite needs (PyTorch for the reference model,
#                                  Open MPI for the runs on several ranks, ffmpeg, procps)
#   tools/install-deps.sh --mpi    also Open MPI: mpirun -np N framechain train (make finds it)
# Options combine (--demo --mpi).
set -eu
usage="usage: tools/install-deps.sh [--demo] [--test] [--mpi]"
pkgs="build-essential pkg-config libopenblas-openmp-dev zlib1g-dev libstb-dev"
pkgs="$pkgs libavformat-dev libavcodec-dev libswscale-dev libavutil-dev"
for opt in "$@"; do
    case "$opt" in
        --demo) pkgs="$pkgs opencv-doc" ;;  # real footage: vtest.avi and Megamind.avi
        --mpi) pkgs="$pkgs libopenmpi-dev openmpi-bin" ;;
        # PyTorch and numpy for the reference model; opencv-doc for its sample videos (real footage);
        # ffmpeg (and ffprobe) for the video tests and the benchmark; Open MPI for the runs on several
        # ranks; procps for pgrep and ps (the distributed tests find and kill one rank). Debian's
        # container images lack procps.
        --test) pkgs="$pkgs python3 python3-numpy python3-torch opencv-doc ffmpeg libopenmpi-dev openmpi-bin procps" ;;
        -h|--help) echo "$usage"; exit 0 ;;
        *) echo "install-deps: unknown option '$opt'; $usage" >&2; exit 2 ;;
    esac
done
missing=""
for p in $pkgs; do
    case " $missing " in *" $p "*) continue ;; esac  # --test --mpi names some twice
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then
    echo "install-deps: everything is installed"
    exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo > /dev/null 2>&1; then
        echo "install-deps: not root and no sudo: run it as root, or install sudo, to install$missing" >&2
        exit 1
    fi
    sudo="sudo"
fi
echo "install-deps: installing$missing"
# Through env: sudo's env_reset (Debian's default) drops an assignment put before it, and debconf
# questions (tzdata's) would then stop an unattended run.
$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing
