#!/usr/bin/env bash
# Every function cuda/backend_cuda.h declares has a weak stand-in in src/backend/registry.c for both
# kinds of build: one that finds the CUDA library at run time (dlsym) and one without CUDA at all (no
# nvcc: make sanitize's build), else a program that calls it (test_cuda, the commands) does not link
# there; and a definition in cuda/*.cu for the stand-in to find. A function added to the header
# without its two stand-ins once broke make sanitize's build while every build with nvcc passed.
set -u
. "$(dirname "$0")/../lib.sh"
names=$(grep -oE '^[a-zA-Z_][a-zA-Z0-9_ *]* \**backend_cuda(_[a-z0-9_]+)?\(' cuda/backend_cuda.h |
    grep -oE 'backend_cuda(_[a-z0-9_]+)?' | sort -u)
count=$(echo "$names" | grep -c .)
missing=""
for f in $names; do
    weak=$(grep -cE "__attribute__\(\(weak\)\) [^(]*[ *]$f\(" src/backend/registry.c)
    [ "$weak" -eq 2 ] || missing="$missing $f ($weak stand-ins, want 2);"
    grep -qE "extern \"C\".*[ *]$f\(|^[a-zA-Z_].*[ *]$f\([^;]*\) *\{" cuda/*.cu ||
        missing="$missing $f (no definition in cuda/*.cu);"
done
[ "$count" -ge 15 ] && [ -z "$missing" ]
expect cuda_standins $? "$count functions of cuda/backend_cuda.h, each with 2 stand-ins in registry.c and a definition in cuda/*.cu${missing:+; wrong:$missing}"
