#!/bin/sh
# Install what framechain needs from Debian/Ubuntu packages, skipping what is already there.
#   tools/install-deps.sh          to build and run framechain
#   tools/install-deps.sh --demo   also the sample videos make demo trains on (opencv-doc)
#   tools/install-deps.sh --test   also what the test suite needs (PyTorch for the reference model,
#                                  Open MPI for the runs on several ranks)
#   tools/install-deps.sh --mpi    also Open MPI: mpirun -np N framechain train (make finds it)
set -eu
pkgs="build-essential pkg-config libopenblas-openmp-dev zlib1g-dev libstb-dev"
pkgs="$pkgs libavformat-dev libavcodec-dev libswscale-dev libavutil-dev"
case "${1:-}" in
    ""|--demo|--test|--mpi) ;;
    *) echo "install-deps: unknown option '$1' (--demo, --test or --mpi)" >&2; exit 2 ;;
esac
if [ "${1:-}" = "--demo" ]; then
    pkgs="$pkgs opencv-doc"  # real footage: vtest.avi and Megamind.avi
fi
if [ "${1:-}" = "--mpi" ]; then
    pkgs="$pkgs libopenmpi-dev openmpi-bin"
fi
if [ "${1:-}" = "--test" ]; then
    # PyTorch for the reference model; opencv-doc for its sample videos (real footage); ffmpeg for the
    # benchmark; Open MPI for the runs on several ranks (optional for users: make finds it)
    pkgs="$pkgs python3 python3-numpy python3-torch opencv-doc ffmpeg libopenmpi-dev openmpi-bin"
fi
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then
    echo "install-deps: everything is installed"
    exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "install-deps: installing$missing"
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends $missing
