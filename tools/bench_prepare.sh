#!/usr/bin/env bash
# prepare's speed beside the ffmpeg command line, in one run: both decode the same sample videos
# (Debian's opencv-doc), scale them with the area filter so the shorter side is SIZE, centre-crop to
# SIZE x SIZE and produce RGB24 frames (ffmpeg writes them to /dev/null; prepare also cuts clips,
# compresses and writes shards). The two alternate run by run (REPS pairs, default 5): the median
# frames/s of each, and the median of the pairs' ratios (framechain's speed over ffmpeg's) with its
# min-max. Not a test: it asserts nothing.
#   tools/bench_prepare.sh [SIZE ...]      (default: 64 256)
set -eu
usage="usage: tools/bench_prepare.sh [SIZE ...]"
for a in "$@"; do
    case $a in
        -h | --help) echo "$usage"; exit 0 ;;
        *[!0-9]* | "" | 0*) echo "bench_prepare: '$a' is not a frame size (a positive integer); $usage" >&2; exit 2 ;;
    esac
done
root=$(cd -- "$(dirname -- "$0")/.." && pwd)  # the repository: its framechain, wherever this runs from
FC=${FC:-$root/framechain}
REPS=${REPS:-5}
. "$root/tools/checks.sh"
positive_whole bench_prepare "REPS=$REPS"
DATA=/usr/share/doc/opencv-doc/examples/data
VIDEOS=("$DATA/vtest.avi" "$DATA/Megamind.avi")
frames=$((795 + 270))
[ -x "$FC" ] || { echo "bench_prepare: $FC is not there or not executable (make builds it; FC=path names another)" >&2; exit 1; }
command -v ffmpeg > /dev/null || { echo "bench_prepare: no ffmpeg on PATH (apt-get install ffmpeg)" >&2; exit 1; }
for v in "${VIDEOS[@]}"; do
    [ -f "$v" ] || { echo "bench_prepare: $v is missing (apt-get install opencv-doc)" >&2; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
# seconds NAME CMD...: CMD's wall time; a command that fails ends the benchmark with its output (an
# instant failure would otherwise count as a very fast run)
seconds() {
    local name=$1 t0 t1 rc=0
    shift
    t0=$(date +%s.%N)
    "$@" > "$tmp/run.log" 2>&1 || rc=$?
    if [ $rc -ne 0 ]; then
        echo "bench_prepare: the $name run failed (status $rc): $(tail -3 "$tmp/run.log" | tr '\n' ' ')" >&2
        return 1
    fi
    t1=$(date +%s.%N)
    awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}'
}

echo "prepare vs ffmpeg: ${VIDEOS[*]##*/} ($frames frames), $REPS alternating pairs, $(nproc) cores, $(date -u +%F)"
printf "%-6s %-14s %-14s %s\n" size "framechain f/s" "ffmpeg f/s" "ratio: median (min-max)"
for size in ${@:-64 256}; do
    fc_times=() ff_times=()
    for r in $(seq "$REPS"); do
        rm -rf "$tmp/out"
        t=$(seconds framechain "$FC" prepare --input "${VIDEOS[0]}" --input "${VIDEOS[1]}" --out "$tmp/out" --size "$size" \
            --clip-frames 8) || exit 1
        fc_times+=("$t")
        t=$(seconds ffmpeg bash -c "for v in ${VIDEOS[*]}; do ffmpeg -v error -threads 1 -i \$v -vf \"scale=w=$size:h=$size:force_original_aspect_ratio=increase:flags=area,crop=$size:$size\" -pix_fmt rgb24 -f rawvideo -y /dev/null || exit 1; done") || exit 1
        ff_times+=("$t")
    done
    fc=$(printf "%s\n" "${fc_times[@]}" | median)
    ff=$(printf "%s\n" "${ff_times[@]}" | median)
    ratios=$(for i in "${!fc_times[@]}"; do awk -v a="${fc_times[$i]}" -v b="${ff_times[$i]}" 'BEGIN {print b / a}'; done)
    r=$(median <<< "$ratios") lo=$(sort -g <<< "$ratios" | head -1) hi=$(sort -g <<< "$ratios" | tail -1)
    awk -v s="$size" -v n="$frames" -v a="$fc" -v b="$ff" -v r="$r" -v lo="$lo" -v hi="$hi" \
        'BEGIN {printf "%-6s %-14.0f %-14.0f %.2f (%.2f-%.2f)\n", s, n / a, n / b, r, lo, hi}'
done
