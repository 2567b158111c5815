#!/usr/bin/env bash
# Each CUDA route (docs/cuda.md, "Routes") against the default, on this machine's GPU, alternating run
# by run: bench_ops at a config (each op's ms a call, the median of each way and their ratio), then the
# config's training step (framechain train's speed line; the median ratio with its min and max over
# the pairs). What decides whether a route becomes the default. A benchmark: nothing is asserted.
#
# usage: tools/bench_routes.sh [OUT_DIR]
#   ROUTES="fp8_fwd,fp8_dgrad,fp8_wgrad" (each word a set of routes switched on together against the defaults:
#   "a,b" both at once, "a b" each alone; the routes off by default, docs/cuda.md), PAIRS=3, CONFIG=configs/starter.conf, STEPS=12 timed
#   steps; FC=./framechain, BENCH_OPS=build/bench_ops; DEVICE=cuda (cpu: a dry run of this script,
#   where no route changes anything); OPS=0 or STEP=0 leaves that part out.
set -u
usage="usage: tools/bench_routes.sh [OUT_DIR]"
case "${1:-}" in
    -h | --help) echo "$usage"; exit 0 ;;
    -*) echo "bench_routes: unknown option '$1'; $usage" >&2; exit 2 ;;
esac
[ $# -le 1 ] || { echo "bench_routes: too many arguments; $usage" >&2; exit 2; }
root=$(cd -- "$(dirname -- "$0")/.." && pwd)  # the repository: its defaults below, wherever this runs from
OUT=${1:-$root/out/bench-routes}
FC=${FC:-$root/framechain}
BENCH_OPS=${BENCH_OPS:-$root/build/bench_ops}
ROUTES=${ROUTES:-fp8_fwd,fp8_dgrad,fp8_wgrad}
PAIRS=${PAIRS:-3}
CONFIG=${CONFIG:-$root/configs/starter.conf}
STEPS=${STEPS:-12}
DEVICE=${DEVICE:-cuda}
. "$root/tools/checks.sh"
positive_whole bench_routes "PAIRS=$PAIRS" "STEPS=$STEPS"
mkdir -p "$OUT"
echo "bench_routes: $("$FC" --version | grep -m1 "^  $DEVICE" | sed 's/^ *//'); $CONFIG; $PAIRS pairs; $(date -u +%F)"

# ops NAME ENV: one bench_ops run into $OUT/ops-NAME-<n>.txt (ENV: FRAMECHAIN_CUDA_ROUTES=... or "")
ops() {
    local f="$OUT/ops-$1-$2.txt"
    env ${3:+FRAMECHAIN_CUDA_ROUTES=$3} "$BENCH_OPS" --device "$DEVICE" --config "$CONFIG" > "$f" 2>&1 || {
        echo "bench_routes: bench_ops failed: $(tail -1 "$f")"; exit 1; }
}
# step NAME N ENV: one training run's ms a step
step() {
    local log="$OUT/step-$1-$2.log"
    rm -rf "$OUT/run"
    env ${3:+FRAMECHAIN_CUDA_ROUTES=$3} "$FC" --device "$DEVICE" train --config "$CONFIG" --run "$OUT/run" \
        --steps $((STEPS + 2)) --set warmup_steps=2 --set checkpoint_every=100000 > "$log" 2>&1
    sed -nE 's/^speed: ([0-9.]+) ms per step.*/\1/p' "$log"
}
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

for route in $ROUTES; do
    on=$(echo "$route" | sed -E 's/,/=1,/g; s/$/=1/')  # FRAMECHAIN_CUDA_ROUTES's form
    echo "== $on against the default"
    if [ "${OPS:-1}" = 1 ]; then
        for p in $(seq "$PAIRS"); do ops default "$p" ""; ops "$route" "$p" "$on"; done
        # each op row: "name ... ms/call x/step ms/step share rate": the name is what precedes ms/call
        printf '%-28s %12s %12s %8s\n' "op (ms a call, medians)" "default" "$route" "ratio"
        for f in "$OUT"/ops-default-*.txt "$OUT"/ops-"$route"-*.txt; do
            awk -v way="$(basename "$f" | sed -E 's/^ops-(.*)-[0-9]+\.txt$/\1/')" '
                $0 ~ /^(linear|attention|ln_mod|qk_norm|gated_add|zero)/ {
                    for (i = 1; i <= NF; i++) if ($i ~ /^[0-9.]+$/) break
                    name = $1; for (j = 2; j < i; j++) name = name " " $j
                    print way "\t" name "\t" $i }
                /^once a step/ && match($0, /adamw 8-bit \+ EMA [0-9.]+/) {  # the optimizer, once a step
                    v = substr($0, RSTART, RLENGTH); sub(/.* /, "", v); print way "\tadamw 8-bit + EMA (a step)\t" v }' "$f"
        done | awk -F'\t' -v route="$route" '
            { n[$1 SUBSEP $2]++; v[$1 SUBSEP $2 SUBSEP n[$1 SUBSEP $2]] = $3; if (!($2 in seen)) { seen[$2] = ++k; order[k] = $2 } }
            function med(way, op,   c, i, j, t, a) { c = n[way SUBSEP op]
                for (i = 1; i <= c; i++) a[i] = v[way SUBSEP op SUBSEP i]
                for (i = 1; i <= c; i++) for (j = i + 1; j <= c; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                return (c % 2) ? a[(c + 1) / 2] : (a[c / 2] + a[c / 2 + 1]) / 2 }
            END { for (i = 1; i <= k; i++) { op = order[i]; d = med("default", op); r = med(route, op)
                      printf "%-28s %12.3f %12.3f %7.2fx\n", op, d, r, (r > 0 ? d / r : 0) } }'
    fi
    if [ "${STEP:-1}" = 1 ]; then
        d_ms="" r_ms=""
        for p in $(seq "$PAIRS"); do
            d_ms="$d_ms $(step default "$p" "")"
            r_ms="$r_ms $(step "$route" "$p" "$on")"
        done
        paste <(tr ' ' '\n' <<< "${d_ms# }") <(tr ' ' '\n' <<< "${r_ms# }") | awk -v route="$on" '
            NF == 2 && $1 > 0 && $2 > 0 { n++; r[n] = $1 / $2 }
            END { if (!n) { print "step: failed (see the step logs)"; exit }
                  for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (r[j] < r[i]) { t = r[i]; r[i] = r[j]; r[j] = t }
                  printf "step: the default over %s, median %.3fx (%.3f-%.3f over %d pairs)\n", route,
                         (n % 2) ? r[(n + 1) / 2] : (r[n / 2] + r[n / 2 + 1]) / 2, r[1], r[n], n }'
        echo "step ms: default ${d_ms# } (median $(tr ' ' '\n' <<< "${d_ms# }" | median)); $on ${r_ms# }" \
             "(median $(tr ' ' '\n' <<< "${r_ms# }" | median))"
    fi
done
rm -rf "$OUT/run"
