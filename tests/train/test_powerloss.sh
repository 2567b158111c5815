#!/usr/bin/env bash
# Power cuts at any point of a training run: tests/train/powerloss_shim.c records every change the
# trainer makes under a folder (names, bytes, fsyncs), tests/train/powerloss.py rebuilds the states
# a power cut could leave at each point (unsynced writes lost or torn at 4 KiB, names not fsynced in
# their folder lost) and reruns the same train command on each: it must resume from at least the
# newest checkpoint the writer had promised durable and end with the uninterrupted run's final
# checkpoint, byte for byte. Then the same with one fsync skipped, which must be seen to fail. And
# prepare under the same shim: every file and folder it makes is made durable before it exits.
# Arguments: the framechain binary, the build folder (with powerloss_shim.so).
set -u
. "$(dirname "$0")/../lib.sh"
BUILD=${2:-build}
SHIM=$(cd "$BUILD" 2> /dev/null && pwd)/powerloss_shim.so
PL=tests/train/powerloss.py
TINY=configs/tiny/starter.conf
STEPS=12
# The tiny starter made smaller still (one block, 16x16 frames): a rerun takes a fifth of a second.
ARGS=(--threads 1 train --config "$TINY" --steps $STEPS --set checkpoint_every=3 --set keep_checkpoints=2
    --set depth=1 --set mlp_ratio=1 --set frame_size=16)
FINAL=ckpt-$(printf %08d $STEPS).safetensors
if [ ! -f "$SHIM" ]; then
    fail powerloss "no $SHIM: make BUILD=$BUILD $BUILD/powerloss_shim.so"
    exit 1
fi
start=$SECONDS

# recorded ROOT LOG [VAR=VALUE...]: the train command under the shim, on ROOT/run, in the background
# (framechain itself: $! is its pid). The ASan runtime need not come first where the build has it.
recorded() {
    local root=$1 log=$2
    shift 2
    (exec env FC_POWERLOSS_ROOT="$root" FC_POWERLOSS_LOG="$log" LD_PRELOAD="$SHIM" \
        ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" "$@" "$FC" "${ARGS[@]}" --run "$root/run") \
        >> "$log.out" 2>&1 &
}

# ---- the uninterrupted run: the final checkpoint every rerun must reproduce; and the same under
# the shim (the fsyncs it numbers are those of the runs with one skipped) ----
"$FC" "${ARGS[@]}" --run "$tmp/ref" > "$tmp/ref.log" 2>&1
rc=$?
mkdir "$tmp/fresh"
recorded "$tmp/fresh" "$tmp/fresh.log"
wait $!
rc_shim=$?
cmp -s "$tmp/ref/$FINAL" "$tmp/fresh/run/$FINAL"
same=$?
expect powerloss_shim_transparent $(( rc != 0 || rc_shim != 0 || same != 0 )) \
    "status $rc, under the shim $rc_shim, the same final checkpoint: $((1 - same)), $(grep -c '^fsync' "$tmp/fresh.log") fsyncs logged"
[ $rc -eq 0 ] && [ -f "$tmp/ref/$FINAL" ] || exit 1

# ---- prepare under the shim: every name it makes durable before it exits 0 ----
# Each file it renames into place was fsynced after its last write, and an fsync of the folder follows
# the rename; the dataset's folder, made by prepare, is followed by an fsync of the folder it is in.
mkdir "$tmp/prep"
FC_POWERLOSS_ROOT="$tmp/prep" FC_POWERLOSS_LOG="$tmp/prep.log" LD_PRELOAD="$SHIM" \
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
    "$FC" prepare --input shapes:3:16 --out "$tmp/prep/ds" --size 16 --clip-frames 8 > "$tmp/prep.out" 2>&1
rc=$?
python3 - "$tmp/prep.log" > "$tmp/prep.check" 2>&1 <<'PYEOF'
import os, sys
ops = [line.rstrip("\n").split("\t") for line in open(sys.argv[1])]
last_write, synced, bad = {}, {}, []
renames = made = 0
for i, op in enumerate(ops):
    if op[0] == "write":
        last_write[op[4]] = i
    elif op[0] == "fsync":
        synced.setdefault(op[4], []).append(i)
    elif op[0] == "rename":
        renames += 1
        src, dst = op[3], op[4]
        if not any(j > last_write.get(src, -1) for j in synced.get(src, []) if j < i):
            bad.append("%s renamed unsynced" % src)
        folder = os.path.dirname(dst) or "."
        if not any(o[0] == "fsync" and o[4] == folder for o in ops[i + 1:]):
            bad.append("no fsync of %s after %s" % (folder, dst))
    elif op[0] == "mkdir":
        made += 1
        parent = os.path.dirname(op[3]) or "."
        if not any(o[0] == "fsync" and o[4] == parent for o in ops[i + 1:]):
            bad.append("no fsync of %s after making %s" % (parent, op[3]))
print("%d renames, %d folders made; %s" % (renames, made, "; ".join(bad) if bad else "each one made durable"))
sys.exit(1 if bad or renames < 3 or made < 1 else 0)
PYEOF
durable=$?
expect powerloss_prepare_durable $(( rc != 0 || durable != 0 )) "prepare status $rc: $(tail -1 "$tmp/prep.check")"

# ---- generate --overwrite of a folder of frames under the shim: the new folder takes the old one's
# name, and that is synced in the folder that holds them before any old frame is removed (else a power
# cut can bring back the old folder's name with some of its frames gone) ----
for role in extrapolate interpolate; do
    "$FC" --threads 1 train --config configs/tiny/$role.conf --run "$tmp/$role" --steps 2 --set depth=1 \
        --set mlp_ratio=1 --set frame_size=16 > "$tmp/$role.log" 2>&1
done
GEN=(--threads 1 generate --starter "$tmp/ref" --extrapolate "$tmp/extrapolate" --interpolate "$tmp/interpolate"
     --first-frame shapes:0 --frames 9 --steps 1 --quiet)
mkdir "$tmp/gen"
"$FC" "${GEN[@]}" --out "$tmp/gen/out" > "$tmp/gen1.log" 2>&1
FC_POWERLOSS_ROOT="$tmp/gen" FC_POWERLOSS_LOG="$tmp/gen.log" LD_PRELOAD="$SHIM" \
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
    "$FC" "${GEN[@]}" --out "$tmp/gen/out" --overwrite --seed 2 > "$tmp/gen2.log" 2>&1
rc=$?
python3 - "$tmp/gen.log" > "$tmp/gen.check" 2>&1 <<'PYEOF'
import sys
ops = [line.rstrip("\n").split("\t") for line in open(sys.argv[1])]
placed = [i for i, op in enumerate(ops) if op[0] == "rename" and op[4] == "out"]
if not placed:
    sys.exit(print("no rename onto out logged") or 1)
i, old = placed[0], ops[placed[0]][3]
gone = [j for j, op in enumerate(ops) if j > i and op[0] == "unlink" and op[3].startswith(old + "/")]
synced = [j for j, op in enumerate(ops) if i < j < (gone[0] if gone else len(ops)) and op[0] == "fsync" and op[4] == "."]
print("%d old frames removed after the swap; the folder synced before the first: %s" % (len(gone), "yes" if synced else "no"))
sys.exit(0 if gone and synced else 1)
PYEOF
ordered=$?
expect powerloss_generate_overwrite_folder $(( rc != 0 || ordered != 0 )) \
    "generate --overwrite status $rc: $(tail -1 "$tmp/gen.check") $(tail -1 "$tmp/gen2.log" | cut -c1-100)"

# ---- the recording: a run killed with kill -9 while it writes the checkpoint of step 9, then the
# same command again to the end (its resume: the stale temporary file removed, metrics.jsonl cut
# back and replaced by rename, the lock file opened again) ----
# The kill comes once the log shows the file half-written (the writer then waits 300 ms): not on the
# file's existence, which precedes its line in the log.
mkdir "$tmp/rec"
: > "$tmp/rec.log"
recorded "$tmp/rec" "$tmp/rec.log" FRAMECHAIN_TEST_WRITE_DELAY_MS=300
pid=$!
wait_until 60 $pid grep -q "^write.*/ckpt-00000009\.safetensors\.tmp-$pid" "$tmp/rec.log"
killed_waited=$waited
kill9_reap $pid
rc1=$?
recorded "$tmp/rec" "$tmp/rec.log"
wait $!
rc2=$?
cmp -s "$tmp/ref/$FINAL" "$tmp/rec/run/$FINAL"
same=$?
n_ops=$(grep -vc '^start' "$tmp/rec.log")
expect powerloss_recorded_run $(( rc1 != 137 || rc2 != 0 || same != 0 || ${#killed_waited} != 0 )) \
    "killed mid-write: status $rc1, then status $rc2 from step $(sed -n 's/^resuming .* from step \([0-9]*\) .*/\1/p' "$tmp/rec.log.out")${killed_waited:+ ($killed_waited)}, final checkpoint equal to the uninterrupted run's: $((1 - same)), $n_ops file operations logged"
[ $rc2 -eq 0 ] && [ $same -eq 0 ] || exit 1

# ---- every state a power cut could leave, rerun ----
check() {  # check NAME LOG [options...]: powerloss.py prints the PASS or FAIL line of NAME
    local name=$1 log=$2
    shift 2
    python3 "$PL" check --log "$log" --work "$tmp/states" --ref "$tmp/ref/$FINAL" --final "run/$FINAL" --name "$name" \
        "$@" -- "$FC" "${ARGS[@]}" --run @STATE@/run > "$tmp/check.out" 2>&1
    local rc=$?
    cat "$tmp/check.out"
    grep -qE "^(PASS|FAIL) $name:" "$tmp/check.out" || fail "$name" "powerloss.py ended with status $rc and no verdict"
}
check powerloss_states "$tmp/rec.log" --min-states 200

# ---- one fsync skipped: the replay must find states that lose a promised checkpoint ----
# The fsyncs of the checkpoint of step 9 (its file's, then its folder's: prune then deletes the
# checkpoint of step 3), and the metrics.jsonl fdatasync that comes before it, as the fresh run under
# the shim numbered them, each counted among its own path's fsyncs (K:PATH): the background writer's
# fsyncs and the training loop's interleave differently from run to run, a path's own do not.
read -r k_file k_dir k_metrics < <(python3 "$PL" pick "$tmp/fresh.log" 9)
for fault in "file|$k_file|the fsync of ckpt-00000009.safetensors's data" \
    "folder|$k_dir|the fsync of the run folder after ckpt-00000009.safetensors's rename" \
    "metrics|$k_metrics|the fdatasync of metrics.jsonl before the checkpoint of step 9"; do
    IFS='|' read -r what k desc <<< "$fault"
    mkdir "$tmp/$what"
    recorded "$tmp/$what" "$tmp/$what.log" FC_POWERLOSS_SKIP_FSYNC="$k"
    wait $!
    rc=$?
    skipped=$(grep -c '^skipfsync' "$tmp/$what.log")
    if [ $rc -ne 0 ] || [ "$skipped" -ne 1 ]; then
        fail "powerloss_detects_missing_${what}_fsync" "the run with fsync $k skipped: status $rc, $skipped fsyncs skipped"
        continue
    fi
    check "powerloss_detects_missing_${what}_fsync" "$tmp/$what.log" --from-fault --expect-failures --fault-what "$desc"
done
echo "powerloss: $((SECONDS - start)) s"
exit 0
