#!/usr/bin/env bash
# Encode and decode of an AutoencoderKL of Stable Diffusion 1.x's shapes (random weights: none ship),
# framechain against PyTorch (eager, fp32) on the same weights and the same machine, run by run in turn
# (A B A B ...), one frame at a time: each pair's ratio, then the median with its min and max.
# Usage: tools/bench_autoencoder.sh   (PAIRS, default 5; SIZE, default 512; FRAMES a run, default 1;
#        THREADS, default 2; DEVICE, default cpu: cuda runs both on the GPU, fp32 without TF32;
#        INPUT, default vtest.avi: shapes:0 needs no FFmpeg; PYTHON with torch; OUT, the folder of the
#        weights, logs and pairs, default out/bench of the repository, wherever it is run from)
set -eu
usage="usage: tools/bench_autoencoder.sh"
case "${1:-}" in
    -h | --help) echo "$usage"; exit 0 ;;
    ?*) echo "bench_autoencoder: takes no arguments (the environment sets its options); $usage" >&2; exit 2 ;;
esac
[ $# -eq 0 ] || { echo "bench_autoencoder: takes no arguments; $usage" >&2; exit 2; }
root=$(cd -- "$(dirname -- "$0")/.." && pwd)  # the repository: its framechain, tools/ and out/
FC=${FC:-$root/framechain}
OUT=${OUT:-$root/out/bench}
# The Python with torch and numpy, Debian's first (as make bench's); a PYTHON given must have them.
PYTHON=${PYTHON:-$(for p in /usr/bin/python3 python3; do $p -c 'import numpy, torch' 2> /dev/null && echo $p && break; done)}
[ -n "$PYTHON" ] || { echo "bench_autoencoder: no python3 with torch and numpy (apt-get install python3-torch python3-numpy)" >&2; exit 1; }
if ! err=$("$PYTHON" -c 'import numpy, torch' 2>&1); then
    echo "bench_autoencoder: $PYTHON cannot import numpy and torch ($(tail -1 <<< "$err")): apt-get install python3-torch python3-numpy, or PYTHON=a python with them" >&2
    exit 1
fi
PAIRS=${PAIRS:-5} SIZE=${SIZE:-512} FRAMES=${FRAMES:-1} THREADS=${THREADS:-2} DEVICE=${DEVICE:-cpu}
. "$root/tools/checks.sh"
positive_whole bench_autoencoder "PAIRS=$PAIRS" "SIZE=$SIZE" "FRAMES=$FRAMES" "THREADS=$THREADS"
INPUT=${INPUT:-/usr/share/doc/opencv-doc/examples/data/vtest.avi}
mkdir -p -- "$OUT"
weights=$OUT/sdvae_random.safetensors
if [ ! -f "$weights" ]; then
    # through a temporary file: a run stopped while the 335 MB are written leaves no truncated weights
    # for the next run to take as made
    trap 'rm -f -- "$weights.partial"' EXIT
    "$PYTHON" "$root/tools/autoencoder_reference.py" --full-kl "$weights.partial"
    mv -- "$weights.partial" "$weights"
fi
ms() { sed -n "s/.*encode \([0-9.]*\) ms a frame, decode \([0-9.]*\) ms a frame.*/\1 \2/p" "$1" | head -1; }
: > "$OUT/autoencoder_pairs.txt"
for p in $(seq "$PAIRS"); do
    "$FC" --threads "$THREADS" --device "$DEVICE" autoencode --vae "$weights" --input "$INPUT" --size "$SIZE" \
        --frames "$FRAMES" > "$OUT/ae_fc.log"
    "$PYTHON" "$root/tools/autoencoder_reference.py" --time "$weights" --size "$SIZE" --frames "$FRAMES" \
        --threads "$THREADS" --device "$DEVICE" > "$OUT/ae_pt.log"
    read -r fe fd <<< "$(ms "$OUT/ae_fc.log")"
    read -r pe pd <<< "$(ms "$OUT/ae_pt.log")"
    echo "$p $fe $fd $pe $pd" | tee -a "$OUT/autoencoder_pairs.txt"
done
"$PYTHON" - "$OUT/autoencoder_pairs.txt" "$SIZE" "$(head -1 "$OUT/ae_pt.log" | cut -d: -f1)" "$DEVICE" <<'PY'
import statistics, sys
rows = [list(map(float, l.split()[1:])) for l in open(sys.argv[1]) if l.strip()]
size, torch, device = sys.argv[2], sys.argv[3], sys.argv[4]
print("AutoencoderKL of SD 1.x's shapes, %sx%s, one frame at a time, on %s, %d pairs (framechain, then %s):"
      % (size, size, device, len(rows), torch))
print("| what | framechain | PyTorch | ratio: median (min-max) |")
print("| --- | --- | --- | --- |")
for i, what in ((0, "encode, per frame"), (1, "decode, per frame")):
    fc = [r[i] for r in rows]; pt = [r[i + 2] for r in rows]
    ratio = [p / f for f, p in zip(fc, pt)]
    print("| %s | %.0f ms | %.0f ms | %.2fx (%.2f-%.2f) |" % (what, statistics.median(fc), statistics.median(pt),
                                                          statistics.median(ratio), min(ratio), max(ratio)))
PY
