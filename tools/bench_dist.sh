#!/usr/bin/env bash
# Training on 1 rank against 2 ranks (mpirun) on the CPU, the same config and global batch, in one run:
# one framechain with every core against two ranks sharing them (THREADS / 2 threads each). Each
# pair alternates the two (1 rank, 2 ranks, 1 rank, ...) on this noisy machine; the table shows the
# median step time of each, the median ratio with its min and max, and the 2-rank run's time in the
# collectives (the gradients' sum, ZeRO-1's all-gather) as ms and as a share of its step. With
# VS="--set key=value ...", each pair is instead 2 ranks with SETS against 2 ranks with SETS and VS
# (e.g. VS="--set overlap_grads=0": the sums after the backward instead of during it), the ratio
# the second's time over the first's. A benchmark, not a test: nothing is asserted.
#
# usage: tools/bench_dist.sh [OUT_DIR]   (CONFIG=configs/small/starter.conf, STEPS=30, PAIRS=5,
#                                         THREADS=all cores, SETS="--set key=value ...", VS="--set ...")
set -u
usage="usage: tools/bench_dist.sh [OUT_DIR]"
case "${1:-}" in
    -h | --help) echo "$usage"; exit 0 ;;
    -*) echo "bench_dist: unknown option '$1'; $usage" >&2; exit 2 ;;
esac
[ $# -le 1 ] || { echo "bench_dist: too many arguments; $usage" >&2; exit 2; }
root=$(cd -- "$(dirname -- "$0")/.." && pwd)  # the repository: its defaults below, wherever this runs from
OUT=${1:-$root/out/bench-dist}
FC=${FC:-$root/framechain}
CONFIG=${CONFIG:-$root/configs/small/starter.conf}
STEPS=${STEPS:-30}
PAIRS=${PAIRS:-5}
THREADS=${THREADS:-$(nproc)}
. "$root/tools/checks.sh"
positive_whole bench_dist "STEPS=$STEPS" "PAIRS=$PAIRS" "THREADS=$THREADS"
SETS=${SETS:-}
VS=${VS:-}
command -v mpirun > /dev/null || { echo "bench_dist: no mpirun (tools/install-deps.sh --mpi)"; exit 1; }
"$FC" --version | grep -q '^  MPI' || { echo "bench_dist: $FC was built without MPI"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
mkdir -p "$OUT"
half=$((THREADS / 2 > 0 ? THREADS / 2 : 1))
# run RANKS LOG [MORE_SETS]: one fresh run; its steady-state ms per step (train's "speed:" line)
run() {
    rm -rf "$OUT/run"
    if [ "$1" -eq 1 ]; then
        "$FC" --threads "$THREADS" train --config "$CONFIG" --run "$OUT/run" --steps "$STEPS" $SETS ${3:-} > "$2" 2>&1
    else
        mpirun -np "$1" "$FC" --threads "$half" train --config "$CONFIG" --run "$OUT/run" --steps "$STEPS" $SETS ${3:-} \
            > "$2" 2>&1
    fi
    sed -nE 's/^speed: ([0-9.]+) ms per step.*/\1/p' "$2"
}
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $THREADS threads; $(date -u +%F)"
comm_of() { sed -nE 's/^communication: ([0-9.]+) ms per step on rank 0 \(([0-9.]+)%.*/\1 \2/p' "$1"; }
if [ -n "$VS" ]; then
    echo "$CONFIG, $STEPS steps a run $SETS; 2 ranks x $half threads against the same with $VS"
else
    echo "$CONFIG, $STEPS steps a run $SETS; 1 rank x $THREADS threads against 2 ranks x $half"
fi
one="" two="" comm="" share="" vcomm="" vshare="" failed=0
for p in $(seq "$PAIRS"); do
    if [ -n "$VS" ]; then
        a=$(run 2 "$OUT/a-$p.log") b=$(run 2 "$OUT/b-$p.log" "$VS")
        c=$(comm_of "$OUT/a-$p.log") d=$(comm_of "$OUT/b-$p.log")
        echo "pair $p: ${a:-failed} ms a step (communication ${c% *} ms), with $VS ${b:-failed} ms (${d% *} ms)"
    else
        a=$(run 1 "$OUT/one-$p.log") b=$(run 2 "$OUT/two-$p.log")
        c=$(comm_of "$OUT/two-$p.log")
        echo "pair $p: 1 rank ${a:-failed} ms, 2 ranks ${b:-failed} ms a step; communication ${c% *} ms (${c#* }%)"
    fi
    # only pairs whose two runs both finished: a failed run's empty time would shift the pairing
    if [ -z "$a" ] || [ -z "$b" ]; then failed=$((failed + 1)); continue; fi
    one="$one $a" two="$two $b" comm="$comm ${c% *}" share="$share ${c#* }"
    [ -z "$VS" ] || vcomm="$vcomm ${d% *}" vshare="$vshare ${d#* }"
done
if [ "$failed" -eq "$PAIRS" ]; then
    echo "bench_dist: no pair finished (see the logs in $OUT: $(ls "$OUT"/*.log | head -2 | tr '\n' ' '))" >&2
    exit 1
fi
med() { tr ' ' '\n' <<< "$1" | grep . | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ratios=$(paste <(tr ' ' '\n' <<< "$one" | grep .) <(tr ' ' '\n' <<< "$two" | grep .) | awk '{ print $2 / $1 }' | tr '\n' ' ')
lo=$(tr ' ' '\n' <<< "$ratios" | grep . | sort -g | head -1 | xargs printf '%.2f')
hi=$(tr ' ' '\n' <<< "$ratios" | grep . | sort -g | tail -1 | xargs printf '%.2f')
if [ -n "$VS" ]; then
    printf '%-34s %14s %14s %22s %18s\n' run "ms a step" "ratio" "(min-max over pairs)" "communication"
    printf '%-34s %14.1f %14s %22s %11.1f ms (%.1f%%)\n' "2 ranks" "$(med "$one")" "" "" "$(med "$comm")" "$(med "$share")"
    printf '%-34s %14.1f %13.2fx %22s %11.1f ms (%.1f%%)\n' "2 ranks, $VS" "$(med "$two")" "$(med "$ratios")" "$lo-$hi" \
        "$(med "$vcomm")" "$(med "$vshare")"
else
    printf '%-10s %14s %14s %22s %18s\n' ranks "ms a step" "2 ranks / 1" "(min-max over pairs)" "communication"
    printf '%-10s %14.1f\n' 1 "$(med "$one")"
    printf '%-10s %14.1f %13.2fx %22s %11.1f ms (%.1f%%)\n' 2 "$(med "$two")" "$(med "$ratios")" "$lo-$hi" "$(med "$comm")" \
        "$(med "$share")"
fi
if [ "$failed" -gt 0 ]; then
    echo "bench_dist: $failed of $PAIRS pairs failed, left out of the table (see the logs in $OUT)" >&2
    exit 1
fi
