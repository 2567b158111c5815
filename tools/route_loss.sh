#!/usr/bin/env bash
# The training loss with a CUDA route (docs/cuda.md, "Routes") against the defaults: the same config,
# seed and batches, STEPS steps each way, then each step's two losses side by side and how far apart
# they end up. For a route that changes the arithmetic (the fp8 routes: GEMMs on fp8
# operands), this is the curve that says whether training still goes where it went. A benchmark of
# quality: nothing is asserted.
#
# usage: tools/route_loss.sh [OUT_DIR]
#   ROUTE="fp8_fwd,fp8_dgrad,fp8_wgrad" (FRAMECHAIN_CUDA_ROUTES's names, "a,b" for several at once), STEPS=200,
#   CONFIG=configs/starter.conf, FC=./framechain, DEVICE=cuda, EVERY=20 (the rows printed: every
#   EVERY-th step, and the last)
set -u
usage="usage: tools/route_loss.sh [OUT_DIR]"
case "${1:-}" in
    -h | --help) echo "$usage"; exit 0 ;;
    -*) echo "route_loss: unknown option '$1'; $usage" >&2; exit 2 ;;
esac
[ $# -le 1 ] || { echo "route_loss: too many arguments; $usage" >&2; exit 2; }
root=$(cd -- "$(dirname -- "$0")/.." && pwd)  # the repository: its defaults below, wherever this runs from
OUT=${1:-$root/out/route-loss}
FC=${FC:-$root/framechain}
ROUTE=${ROUTE:-fp8_fwd,fp8_dgrad,fp8_wgrad}
STEPS=${STEPS:-200}
CONFIG=${CONFIG:-$root/configs/starter.conf}
DEVICE=${DEVICE:-cuda}
EVERY=${EVERY:-20}
mkdir -p "$OUT"
on=$(echo "$ROUTE" | sed -E 's/,/=1,/g; s/$/=1/')  # FRAMECHAIN_CUDA_ROUTES's form
echo "route_loss: $("$FC" --version | grep -m1 "^  $DEVICE" | sed 's/^ *//'); $CONFIG; $STEPS steps; $on against the defaults; $(date -u +%F)"
for way in default route; do
    rm -rf "$OUT/$way"
    routes=""
    [ "$way" = route ] && routes=$on
    env ${routes:+FRAMECHAIN_CUDA_ROUTES=$routes} "$FC" --device "$DEVICE" train --config "$CONFIG" \
        --run "$OUT/$way" --steps "$STEPS" --set checkpoint_every=100000 --set sample_every=0 > "$OUT/$way.log" 2>&1 ||
        { echo "route_loss: the $way run failed: $(tail -1 "$OUT/$way.log")"; exit 1; }
    sed -nE 's/.*"step": *([0-9]+), *"loss": *([-0-9.eE+naif]+), *"smooth_loss": *([-0-9.eE+naif]+).*/\1 \2 \3/p' \
        "$OUT/$way/metrics.jsonl" > "$OUT/$way.loss"
    cp "$OUT/$way/metrics.jsonl" "$OUT/$way.metrics.jsonl" && rm -rf "${OUT:?}/$way"  # not the final checkpoint
    grep -m1 '^speed:' "$OUT/$way.log" | sed "s/^/$way: /"
done
# step, loss and smoothed loss each way; the smoothed losses' relative difference
join "$OUT/default.loss" "$OUT/route.loss" | awk -v every="$EVERY" -v steps="$STEPS" -v on="$on" '
    BEGIN { printf "%6s %10s %10s %12s %12s %8s\n", "step", "loss", "route", "smoothed", "route", "diff" }
    { d = $3 != 0 ? ($5 - $3) / $3 : 0; n++
      if ($1 % every == 0 || $1 == steps) printf "%6d %10.4f %10.4f %12.4f %12.4f %+7.2f%%\n", $1, $2, $4, $3, $5, 100 * d
      if (n > steps / 2) { s += d; m++; if (d > hi || m == 1) hi = d; if (d < lo || m == 1) lo = d } }
    END { if (!n) { print "route_loss: no losses (see the logs)"; exit 1 }
          printf "the smoothed loss over the second half: %s against the defaults %+.2f%% on average (%+.2f%% to %+.2f%%)\n",
                 on, 100 * s / m, 100 * lo, 100 * hi }'
