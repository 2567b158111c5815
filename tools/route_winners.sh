#!/usr/bin/env bash
# The routes a GPU run measured faster, as FRAMECHAIN_CUDA_ROUTES's list: from tools/bench_routes.sh's
# output, each set of routes whose training step was faster than the defaults in every pair (the
# smallest of its ratios over 1), less any set that tools/route_loss.sh's output shows moving the
# smoothed loss by more than MAX_LOSS percent on average (default 1) over the second half, and any
# set with an fp8 route (arithmetic of its own) that route_loss.sh's output does not show. Prints
# the list (empty: none), and one line for each set on stderr saying why it was taken or left.
# tools/gpu_run.sh runs framechain against PyTorch with these, so that one call can time the
# routes and then the step with the ones that won.
#
# usage: tools/route_winners.sh ROUTES_OUTPUT [LOSS_OUTPUT]
set -u
usage="usage: tools/route_winners.sh ROUTES_OUTPUT [LOSS_OUTPUT]"
case "${1:-}" in
    -h | --help) echo "$usage"; exit 0 ;;
    -*) echo "route_winners: unknown option '$1'; $usage" >&2; exit 2 ;;
esac
[ $# -ge 1 ] && [ $# -le 2 ] || { echo "route_winners: wants 1 to 2 arguments, not $#; $usage" >&2; exit 2; }
routes=${1:?usage: tools/route_winners.sh ROUTES_OUTPUT [LOSS_OUTPUT]}
loss=${2:-/dev/null}
[ -r "$routes" ] || { echo "route_winners: cannot read $routes" >&2; exit 1; }
[ -r "$loss" ] || loss=/dev/null
awk -v max_loss="${MAX_LOSS:-1}" '
    FNR == 1 { file++ }
    # bench_routes.sh: "== a=1,b=1 against the default", then "step: the default over a=1,b=1, median R (LO-HI over N pairs)"
    file == 1 && /^step: the default over / {
        set = $5; sub(/,$/, "", set)
        smallest = $0; sub(/.*[(]/, "", smallest); sub(/-.*/, "", smallest); lo[set] = smallest + 0
        if (!(set in order)) { order[set] = ++n; name[n] = set }
    }
    # route_loss.sh: "the smoothed loss over the second half: a=1,b=1 against the defaults +X% on average ..."
    file == 2 && /^the smoothed loss over the second half: / {
        set = $8; d = $12; sub(/%$/, "", d); moved[set] = d + 0
        if (d !~ /^[-+]?[0-9]+([.][0-9]*)?$/) bad[set] = d  # nan, inf: the route diverged
    }
    END {
        for (i = 1; i <= n; i++) {
            set = name[i]
            if (!(lo[set] > 1)) { printf "route_winners: %s left: not faster in every pair (smallest ratio %.3f)\n", set, lo[set] > "/dev/stderr"; continue }
            if (set ~ /fp8/ && !(set in moved)) {  # fp8 changes the arithmetic: no curve, no route
                printf "route_winners: %s left: faster (smallest ratio %.3f), but no loss curve for it\n", set, lo[set] > "/dev/stderr"; continue }
            if (set in bad) {
                printf "route_winners: %s left: faster (smallest ratio %.3f) but its loss curve is not a number (%s)\n", set, lo[set], bad[set] > "/dev/stderr"; continue }
            if ((set in moved) && (moved[set] > max_loss || moved[set] < -max_loss)) {
                printf "route_winners: %s left: faster (smallest ratio %.3f) but the smoothed loss moved %+.2f%%\n", set, lo[set], moved[set] > "/dev/stderr"; continue }
            printf "route_winners: %s taken: faster in every pair (smallest ratio %.3f)%s\n", set, lo[set],
                   (set in moved) ? sprintf(", the smoothed loss %+.2f%%", moved[set]) : "" > "/dev/stderr"
            list = list (list == "" ? "" : ",") set
        }
        print list
    }' "$routes" "$loss"
