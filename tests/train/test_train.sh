#!/usr/bin/env bash
# Training that survives crashes: an uninterrupted run against one killed with kill -9 again and
# again (also while checkpoints are being written), SIGTERM, corrupt and truncated checkpoints, a
# failing disk, a NaN loss, NaN weights, checkpoints that do not continue the run, recompute against
# keeping every activation, and 8-bit against fp32 AdamW.
set -u
. "$(dirname "$0")/../lib.sh"
# The Python with numpy (the checks that read checkpoints need it): Debian's, else the one on PATH.
PYTHON=${PYTHON:-$(for p in /usr/bin/python3 python3; do $p -c 'import numpy' 2> /dev/null && echo $p && break; done)}
PYTHON=${PYTHON:-python3}
TINY=configs/tiny/starter.conf
STEPS=60
SETS=(--set steps=$STEPS --set checkpoint_every=4 --set keep_checkpoints=3 --set warmup_steps=5 --set lr=1e-3)
. "$(dirname "$0")/train_lib.sh"  # train RUN ..., bg_train LOG RUN ...
losses() { sed -E 's/.*"step":([0-9]+),"loss":([^,]+),.*/\1 \2/' "$1/metrics.jsonl"; }
final() { echo "$1/ckpt-$(printf %08d $STEPS).safetensors"; }

# ---- the uninterrupted run: the reference every other run must reproduce ----
(train "$tmp/ref") > "$tmp/ref.log" 2>&1
rc=$?
lines=$(wc -l < "$tmp/ref/metrics.jsonl")
expect train_runs_to_the_end $(( rc != 0 || lines != STEPS )) "status $rc, $lines metrics lines, $(tail -1 "$tmp/ref.log")"
n_ckpt=$(ls "$tmp/ref"/ckpt-*.safetensors | wc -l)
expect keeps_newest_checkpoints $(( n_ckpt != 3 )) "$n_ckpt checkpoints kept (keep_checkpoints = 3)"
first=$(losses "$tmp/ref" | head -10 | awk '{s+=$2} END {print s/NR}')
last=$(losses "$tmp/ref" | tail -10 | awk '{s+=$2} END {print s/NR}')
expect loss_goes_down $(awk -v a="$first" -v b="$last" 'BEGIN {print !(b < 0.9 * a)}') "mean loss of steps 1-10 $first, of steps 51-60 $last"
# Each metrics line's smooth_loss, recomputed from the losses: the first step's loss, then an
# exponential average with weight 0.02 on each new step's; the steps counted 1, 2, ... without a gap.
smooth=$(sed -E 's/.*"step":([0-9]+),"loss":([^,]+),"smooth_loss":([^,]+),.*/\1 \2 \3/' "$tmp/ref/metrics.jsonl" |
    awk '{ want = NR == 1 ? $2 : 0.98 * want + 0.02 * $2; d = $3 - want; if (d < 0) d = -d
           if (d > 1e-5 * (want < 0 ? -want : want) || $1 != NR) bad++; if (d > worst) worst = d }
         END { printf "%d %d %.3g", bad, NR, worst }')
read -r off counted worst <<< "$smooth"
expect smooth_loss_is_the_average $(( ${off:-1} != 0 || ${counted:-0} != STEPS )) \
    "${off:-?} of ${counted:-?} lines off the exponential average of their losses (largest difference ${worst:-?})"
# The memory plan printed before the first step holds what the run measured at its end: on the CPU
# the whole resident set (the program, the checkpoint's staging buffer, the threads' scratch). In the
# sanitizer build ASan's shadow memory and redzones come on top of every allocation: there only the
# plan's floor is checked.
ratio=$(sed -nE 's/^peak cpu memory: .*the measure ([0-9.]+)x the plan\)$/\1/p' "$tmp/ref.log")
most=1.05
if ldd "$FC" 2> /dev/null | grep -q libasan; then most=100; fi
expect memory_plan_holds_the_peak $(awk -v r="${ratio:-0}" -v m=$most 'BEGIN {print !(r >= 0.9 && r <= m)}') \
    "$(grep '^peak' "$tmp/ref.log" || echo 'no peak line'); plan: $(grep -E '^  (ckpt staging|program|total) ' "$tmp/ref.log" | tr -s ' ' | tr '\n' ';')"
# Attention's scratch is each thread's (L, L) scores and their gradients: with 1024 tokens a frame
# (frame_size 32, patch 1) 8 MiB a thread, which the plan counts for the threads the run has
ratio2=$("$FC" --threads 2 train --config "$TINY" --run "$tmp/long_attn" --steps 1 --set warmup_steps=0 --set frame_size=32 \
    --set patch=1 --set batch_size=1 2>&1 | sed -nE 's/^peak cpu memory: .*the measure ([0-9.]+)x the plan\)$/\1/p')
expect memory_plan_holds_attention_scratch $(awk -v r="${ratio2:-0}" -v m=$most 'BEGIN {print !(r >= 0.9 && r <= m)}') \
    "1024 tokens a frame on 2 threads: the measure ${ratio2:-?}x the plan"
# The data loader's batches and its threads' clips (long clips of footage: two of 790 frames at 64x64
# are 19 MiB), and the previews' sampler windows and figure: in the plan (each run was 1.06-1.37x it)
"$FC" --threads 1 prepare --input "$SAMPLES/vtest.avi" --out "$tmp/long64" --size 64 --clip-frames 790 > /dev/null 2>&1
ratio3=$("$FC" --threads 1 train --config "$TINY" --run "$tmp/long_clips" --data "$tmp/long64" --steps 2 --set warmup_steps=0 \
    --set frame_size=64 --set batch_size=1 2>&1 | sed -nE 's/^peak cpu memory: .*the measure ([0-9.]+)x the plan\)$/\1/p')
ratio4=$("$FC" --threads 1 train --config "$TINY" --run "$tmp/with_previews" --steps 4 --set warmup_steps=0 --set sample_every=2 \
    2>&1 | sed -nE 's/^peak cpu memory: .*the measure ([0-9.]+)x the plan\)$/\1/p')
expect memory_plan_holds_loader_and_previews $(awk -v r="${ratio3:-0}" -v p="${ratio4:-0}" -v m=$most \
    'BEGIN {print !(r >= 0.9 && r <= m && p >= 0.9 && p <= m)}') \
    "clips of 790 frames: the measure ${ratio3:-?}x the plan; previews every 2 steps: ${ratio4:-?}x"
rm -rf "$tmp/long64" "$tmp/long_clips" "$tmp/with_previews"
# A plan the machine could never hold is refused before anything is allocated, the run folder it made
# removed, and the parents made for it (--run a/b/run in a new a/); one over what is available now is
# a warning and the run goes on.
FRAMECHAIN_TEST_MEM_TOTAL_MIB=30 "$FC" --threads 1 train --config "$TINY" --run "$tmp/too_big/b/run" --steps 2 \
    > "$tmp/too_big.log" 2>&1
rc=$?
FRAMECHAIN_TEST_MEM_AVAILABLE_MIB=10 "$FC" --threads 1 train --config "$TINY" --run "$tmp/tight" --steps 2 \
    > "$tmp/tight.log" 2>&1
rc2=$?
expect memory_plan_over_the_machine $(( rc != 1 || rc2 != 0 )) \
    "30 MiB machine: status $rc, $(grep -c . "$tmp/too_big.log") lines, folder left: $([ -e "$tmp/too_big" ] && echo yes || echo no)"
grep -q "exceed this machine's 0.03 GiB" "$tmp/too_big.log" && [ ! -e "$tmp/too_big" ] &&
    grep -q "warning: .*more than the 0.01 GiB this machine has available now" "$tmp/tight.log" &&
    grep -q "^done: $tmp/tight at step 2" "$tmp/tight.log"
expect memory_plan_over_the_machine_lines $? \
    "$(grep framechain: "$tmp/too_big.log" | head -1); $(grep warning "$tmp/tight.log" | head -1)"
# The disk the checkpoints need, said before the first step: a file system with room for not even one
# checkpoint (2.30 MiB here) is refused, the run folder it made removed; room for fewer than keep_checkpoints
# and the one being written beside them (9.21 MiB) is a warning; a resumed run's checkpoints already hold
# most of that room, so the same free space is enough for it.
grep -q "^disk: a checkpoint is 2.30 MiB; the run folder holds up to 4 of them (keep_checkpoints 3 and the one being written): 9.21 MiB; .* free there$" "$tmp/ref.log"
expect disk_plan_said $? "$(grep '^disk:' "$tmp/ref.log" || echo 'no disk line')"
FRAMECHAIN_TEST_DISK_FREE_MIB=2 "$FC" --threads 1 train --config "$TINY" --run "$tmp/no_room" --steps 2 > "$tmp/no_room.log" 2> "$tmp/no_room.err"
rc=$?
FRAMECHAIN_TEST_DISK_FREE_MIB=3 "$FC" --threads 1 train --config "$TINY" --run "$tmp/little_room" --steps 4 \
    --set keep_checkpoints=3 --set checkpoint_every=1 > "$tmp/little_room.log" 2>&1
rc2=$?
cp -r "$tmp/ref" "$tmp/room_held"
FRAMECHAIN_TEST_DISK_FREE_MIB=3 "$FC" --threads 1 train --config "$TINY" --run "$tmp/room_held" "${SETS[@]}" --extend \
    --steps $((STEPS + 2)) > "$tmp/room_held.log" 2>&1
rc3=$?
expect disk_plan_refuses_and_warns $(( rc != 1 || $(wc -l < "$tmp/no_room.err") != 1 || rc2 != 0 || rc3 != 0 ||
    $(grep -c "no_room: 2.00 MiB free on its file system, less than one checkpoint (2.30 MiB)" "$tmp/no_room.err") != 1 ||
    $(grep -c "^step" "$tmp/no_room.log") != 0 ||
    $(grep -c "warning: .*little_room: 3.00 MiB free on its file system, less than the 9.21 MiB more" "$tmp/little_room.log") != 1 ||
    $(grep -c "warning" "$tmp/room_held.log") != 0 )) \
    "2 MiB free: status $rc, $(head -c 120 "$tmp/no_room.err"), folder left: $([ -e "$tmp/no_room" ] && echo yes || echo no); 3 MiB: status $rc2, $(grep -c warning "$tmp/little_room.log") warning; 3 MiB beside 3 checkpoints: status $rc3, $(grep -c warning "$tmp/room_held.log") warnings"
[ ! -e "$tmp/no_room" ]
expect disk_plan_refusal_leaves_nothing $? "$(ls -a "$tmp/no_room" 2>&1 | tr '\n' ' ')"
# A run that writes fewer checkpoints than keep_checkpoints and one (2 steps, checkpoint_every 100: the
# last step's alone) needs room for those only: no warning where one fits.
FRAMECHAIN_TEST_DISK_FREE_MIB=3 "$FC" --threads 1 train --config "$TINY" --run "$tmp/short_room" --steps 2 \
    --set keep_checkpoints=3 > "$tmp/short_room.log" 2>&1
rc=$?
(( rc == 0 && $(grep -c warning "$tmp/short_room.log") == 0 )) &&
    grep -q "^disk: a checkpoint is 2.30 MiB; the run folder holds up to 1 of them (the 1 this run writes; keep_checkpoints 3): 2.30 MiB; 3.00 MiB free there$" "$tmp/short_room.log"
expect disk_plan_counts_the_checkpoints_written $? "status $rc: $(grep -E '^disk|warning' "$tmp/short_room.log" | head -c 400)"

"$FC" inspect "$(final "$tmp/ref")" > "$tmp/inspect.log" 2>&1
rc=$?
bad=$(grep -c "CRC BAD" "$tmp/inspect.log")
ok=$(grep -c "CRC ok" "$tmp/inspect.log")
expect inspect_checkpoint $(( rc != 0 || bad != 0 || ok < 100 )) "status $rc, $ok tensors with a good CRC, $bad bad, $(grep -m1 '^step' "$tmp/inspect.log")"
# The run folder itself: its checkpoints' steps, where its metrics end, then its newest checkpoint as above
"$FC" inspect "$tmp/ref" > "$tmp/inspect_run.log" 2>&1
rc=$?
kept=$(ls "$tmp/ref"/ckpt-*.safetensors | wc -l)
head -1 "$tmp/inspect_run.log" | grep -q "^run $tmp/ref: $kept checkpoints, steps $STEPS " &&
    grep -q "^metrics.jsonl   $STEPS lines, the last at step $STEPS, smooth_loss [0-9.]" "$tmp/inspect_run.log" &&
    grep -q "^the newest: $(final "$tmp/ref")$" "$tmp/inspect_run.log" &&
    diff <(sed '1,/^the newest/d' "$tmp/inspect_run.log" | sed 1d) "$tmp/inspect.log" > /dev/null
expect inspect_run_folder $(( rc != 0 || $? != 0 )) "status $rc: $(head -3 "$tmp/inspect_run.log" | tr '\n' ';')"
# metrics.jsonl with lines that are no step's record (junk put in, a last line torn by a power cut, which
# names a later step): counted and the first named, left out of where the metrics end; the run inspected
cp -r "$tmp/ref" "$tmp/torn_metrics"
{ head -3 "$tmp/ref/metrics.jsonl"; echo 'not a record'; tail -n +4 "$tmp/ref/metrics.jsonl"
  printf '{"step":%d,"loss":0.5,"smoo' $((STEPS + 40)); } > "$tmp/torn_metrics/metrics.jsonl"
"$FC" inspect "$tmp/torn_metrics" > "$tmp/torn_metrics.log" 2>&1
rc=$?
grep -q "^metrics.jsonl   $((STEPS + 2)) lines, the last at step $STEPS, smooth_loss [0-9.]" "$tmp/torn_metrics.log" &&
    grep -q "^metrics.jsonl   2 of its $((STEPS + 2)) lines cannot be read, left out .*: the first is line 4: " \
        "$tmp/torn_metrics.log" && grep -q "^the newest: $tmp/torn_metrics/ckpt-" "$tmp/torn_metrics.log"
expect inspect_run_says_unread_metrics_lines $(( rc != 0 || $? != 0 )) \
    "status $rc: $(grep '^metrics.jsonl' "$tmp/torn_metrics.log" | tr '\n' ';')"
mkdir "$tmp/no_ckpt" && head -2 "$tmp/ref/metrics.jsonl" > "$tmp/no_ckpt/metrics.jsonl"
"$FC" inspect "$tmp/no_ckpt" > "$tmp/no_ckpt.log" 2>&1
rc=$?
expect inspect_run_without_checkpoint $(( rc != 1 || $(grep -c . "$tmp/no_ckpt.log") != 1 ||
    $(grep -c "no_ckpt: a run folder with no checkpoint, its metrics.jsonl up to step 2: a rerun of train starts it again from step 0 only where that is within 2 checkpoint_every steps, else refuses" "$tmp/no_ckpt.log") != 1 )) \
    "status $rc: $(head -1 "$tmp/no_ckpt.log")"
: > "$tmp/no_ckpt/metrics.jsonl"
"$FC" inspect "$tmp/no_ckpt" > "$tmp/no_ckpt.log" 2>&1
rc=$?
expect inspect_run_without_checkpoint_yet $(( rc != 1 || $(grep -c "no_ckpt: a run folder with no checkpoint yet" "$tmp/no_ckpt.log") != 1 )) \
    "status $rc: $(head -1 "$tmp/no_ckpt.log")"
# inspect CKPT applies a resume's checks: a checkpoint named for another step than its metadata's is
# set aside by a resume, and inspect of the file alone says so (it said every CRC checks, status 0)
mkdir "$tmp/misnamed" && cp "$(final "$tmp/ref")" "$tmp/misnamed/ckpt-00099999.safetensors"
"$FC" inspect "$tmp/misnamed/ckpt-00099999.safetensors" > "$tmp/misnamed.log" 2>&1
rc=$?
expect inspect_checkpoint_named_for_another_step $(( rc != 1 ||
    $(grep -c "^UNUSABLE: .*ckpt-00099999.safetensors: its metadata says step $STEPS; a resume sets it aside" "$tmp/misnamed.log") != 1 )) \
    "status $rc: $(grep -m1 UNUSABLE "$tmp/misnamed.log" | cut -c1-160)"
# a tensor whose name is longer than 250 bytes: its CRC is still looked up and checked (a wrong one: 1)
"$PYTHON" - "$tmp/longname.safetensors" <<'PY'
import json, struct, sys
name = "w" * 300
head = json.dumps({name: {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                   "__metadata__": {"crc32." + name: "deadbeef"}}).encode()
open(sys.argv[1], "wb").write(struct.pack("<Q", len(head)) + head + b"\0" * 4)
PY
"$FC" inspect "$tmp/longname.safetensors" > "$tmp/longname.log" 2>&1
rc=$?
expect inspect_long_tensor_name_crc_checked $(( rc != 1 || $(grep -c "CRC BAD" "$tmp/longname.log") != 1 )) \
    "status $rc: $(tail -1 "$tmp/longname.log")"
"$PYTHON" tools/safetensors_io.py "$(final "$tmp/ref")" > "$tmp/py.log" 2>&1
rc=$?
expect python_reads_checkpoint $(( rc != 0 || $(grep -c '^optim\.' "$tmp/py.log") == 0 )) \
    "status $rc, $(grep -c . "$tmp/py.log") lines from tools/safetensors_io.py, $(grep -c '^optim\.' "$tmp/py.log") optim.* tensors"

# ---- a short run: its last step checkpointed off the checkpoint_every grid, and the EMA's warm-up ----
# 3 steps with checkpoint_every = 2: checkpoints at steps 2 and 3. Between them the EMA takes step 3's
# weights with decay min(ema_decay, (1 + 3) / (10 + 3)) (config.c's ema_decay): fitted over every
# tensor from the two checkpoints, ema3 - w3 = decay (ema2 - w3).
(train "$tmp/three_steps" --steps 3 --set checkpoint_every=2) > "$tmp/three_steps.log" 2>&1
rc=$?
decay=$("$PYTHON" - "$tmp/three_steps/ckpt-00000002.safetensors" "$tmp/three_steps/ckpt-00000003.safetensors" <<'PY' 2>&1 | tail -1
import sys
sys.path.insert(0, "tools")
import numpy as np
from safetensors_io import read_safetensors
a, _ = read_safetensors(sys.argv[1])
b, _ = read_safetensors(sys.argv[2])
num = den = 0.0
for k in (k for k in b if k.startswith("model.")):
    w3, e2, e3 = (np.asarray(t, np.float64) for t in (b[k], a["ema." + k[6:]], b["ema." + k[6:]]))
    num += ((e3 - w3) * (e2 - w3)).sum()
    den += ((e2 - w3) ** 2).sum()
print("%.6f" % (num / den))
PY
)
expect short_run_checkpoints_last_step $(( rc != 0 || $(ls "$tmp/three_steps" | grep -c '^ckpt-0000000[23].safetensors$') != 2 )) \
    "status $rc, checkpoints: $(ls "$tmp/three_steps" | grep ckpt | tr '\n' ' ')"
expect ema_warms_up $(awk -v d="$decay" 'BEGIN { print !(d + 0 > 0 && (d - 4 / 13 < 1e-4 && 4 / 13 - d < 1e-4)) }') \
    "the EMA's decay at step 3 fitted from checkpoints 2 and 3: $decay (want 4/13 = 0.307692)"

# ---- checkpoints written in the background: what the loop waited for, and the synchronous writer ----
# Every checkpoint has its line with the time the loop was blocked; a submit's time is on the next
# step's metrics line, so exactly the steps after a checkpoint (5, 9, ..., 57) have a blocked time.
blocked_re='\(blocked [0-9.]+ ms: copy [0-9.]+ \+ wait [0-9.]+; written in [0-9.]+ s'
n_ckpt_lines=$(grep -c "^checkpoint $tmp/ref/ckpt-[0-9]*\.safetensors" "$tmp/ref.log")
n_blocked=$(grep -cE "^checkpoint $tmp/ref/ckpt-[0-9]{8}\.safetensors $blocked_re in the background\)$" "$tmp/ref.log")
blocked_steps=$(sed -nE 's/.*"step":([0-9]+),.*"ckpt_blocked_ms":([0-9.]+)}$/\1 \2/p' "$tmp/ref/metrics.jsonl" |
    awk '$2 > 0 {printf "%s ", $1}')
want_steps=$(seq 5 4 $((STEPS - 3)) | tr '\n' ' ')
expect checkpoint_blocked_time_logged $(( n_ckpt_lines != STEPS / 4 || n_blocked != n_ckpt_lines )) \
    "$n_blocked of $n_ckpt_lines checkpoint lines (of $((STEPS / 4)) checkpoints) with a blocked time: $(grep -m1 "^checkpoint $tmp/ref/" "$tmp/ref.log" | grep -o '(blocked.*')"
expect checkpoint_blocked_time_in_metrics $([ "$blocked_steps" = "$want_steps" ]; echo $?) \
    "metrics lines with ckpt_blocked_ms > 0 at steps: ${blocked_steps:-none} (expected $want_steps)"

(train "$tmp/sync" --sync-checkpoints) > "$tmp/sync.log" 2>&1
rc=$?
cmp -s "$(final "$tmp/ref")" "$(final "$tmp/sync")"
same=$?
n_sync=$(grep -cE "^checkpoint $tmp/sync/ckpt-[0-9]{8}\.safetensors $blocked_re synchronously\)$" "$tmp/sync.log")
expect sync_checkpoints_identical $(( rc != 0 || same != 0 || n_sync != STEPS / 4 )) \
    "status $rc, $n_sync of $((STEPS / 4)) checkpoints written synchronously, final checkpoint equal to the background writer's: $((1 - same))"

# Slow writes (300 ms each): the background writer waits for a write before it reuses its staging
# buffer for the next checkpoint (one every step), so its files hold the same tensors as those the
# synchronous writer makes (one every 2 steps); and the synchronous writer's write is inside the
# step's blocked time (step 3's line holds the checkpoint of step 2: at least the 300 ms).
(export FRAMECHAIN_TEST_WRITE_DELAY_MS=300; train "$tmp/slow_bg" --steps 4 --set checkpoint_every=1) > "$tmp/slow_bg.log" 2>&1
rc1=$?
(export FRAMECHAIN_TEST_WRITE_DELAY_MS=300; train "$tmp/slow_sync" --steps 4 --set checkpoint_every=2 --sync-checkpoints) \
    > "$tmp/slow_sync.log" 2>&1
rc2=$?
same=0
for s in 2 4; do
    f=$(printf ckpt-%08d.safetensors $s)
    [ -f "$tmp/slow_bg/$f" ] && [ "$(ckpt_tensors "$tmp/slow_bg/$f")" = "$(ckpt_tensors "$tmp/slow_sync/$f")" ] && same=$((same + 1))
done
blocked3=$(sed -nE 's/^\{"step":3,.*"ckpt_blocked_ms":([0-9.]+)}$/\1/p' "$tmp/slow_sync/metrics.jsonl")
expect slow_writes_same_tensors $(( rc1 != 0 || rc2 != 0 || same != 2 )) \
    "status $rc1, $rc2: $same of 2 checkpoints (steps 2, 4) with the same tensors, written in the background every step and synchronously every 2"
expect sync_write_is_blocked_time $(awk -v b="${blocked3:-0}" 'BEGIN { print !(b >= 300) }') \
    "synchronous writes of 300 ms: step 3's ckpt_blocked_ms ${blocked3:-none}"

# ---- kill -9 again and again, rerunning until the run finishes ----
# The kills follow the run's progress, not the clock: kill k (0..19) comes once the restarted process
# has made a step of its own and reached step 2 + 2k; every third one instead once it has begun
# writing a checkpoint (each write is held 50 ms half-written). The kill points end at step 40: from
# there the run has 20 steps and 5 checkpoint writes of 50 ms or more to go, so all 20 kills land on a
# fast machine as on a slow one; then the run goes on to its end. A kill has landed when the process
# died of SIGKILL (status 137).
KILLS=20
kills=0 during_write=0 starts=0 why=""
export FRAMECHAIN_TEST_WRITE_DELAY_MS=50
while :; do
    starts=$((starts + 1))
    bg_train "$tmp/kill.log" "$tmp/kill"
    pid=$!
    if [ $kills -lt $KILLS ]; then
        if [ $((kills % 3)) -eq 2 ]; then
            wait_until 60 $pid writing_checkpoint "$tmp/kill" $pid
        else
            wait_until 60 $pid trained_past "$tmp/kill" "$tmp/kill.log" $((2 + 2 * kills))
        fi
        [ -n "$waited" ] && why="; start $starts: $waited; $(tail -1 "$tmp/kill.log")"
        kill9_reap $pid
        rc=$?
    else
        wait $pid
        rc=$?
    fi
    [ $rc -eq 137 ] && [ $kills -lt $KILLS ] && [ -z "$why" ] || break
    kills=$((kills + 1))
    writing_checkpoint "$tmp/kill" $pid && during_write=$((during_write + 1))
done
unset FRAMECHAIN_TEST_WRITE_DELAY_MS
# the last start went on from a checkpoint: a run that ignored its checkpoints would match the reference too
resumed=$(sed -n 's/^resuming .* from step \([0-9]*\) .*/\1/p' "$tmp/kill.log")
expect kill9_runs_finish $(( rc != 0 || kills < KILLS || ${resumed:-0} == 0 )) \
    "$kills kills with kill -9 ($during_write while a checkpoint was being written), $starts starts, status $rc, the last resumed from step ${resumed:-none}$why"
expect kill9_some_during_checkpoint_write $(( during_write < 2 )) "$during_write kills landed while a checkpoint was half-written"
cmp -s "$(final "$tmp/ref")" "$(final "$tmp/kill")"
expect kill9_final_checkpoint_identical $? "the final checkpoint (weights, EMA, optimizer state) equals the uninterrupted run's, byte for byte"
cmp -s <(losses "$tmp/ref") <(losses "$tmp/kill")
expect kill9_same_losses $? "the per-step losses of all $STEPS steps equal the uninterrupted run's"
left=$(ls "$tmp/kill" | grep -c '\.tmp-')
expect no_temporary_files_left $(( left != 0 )) "$left temporary files in the run folder"

# ---- SIGTERM: a checkpoint, a clean exit, and the run goes on ----
# Checkpoint writes of 200 ms keep the run going for 3 s even on a fast GPU (each waits for the last).
FRAMECHAIN_TEST_WRITE_DELAY_MS=200 bg_train "$tmp/term.log" "$tmp/term"
pid=$!
# The signal once the run has made step 6: its handler is in place by then (a SIGTERM before it would
# just end the process).
wait_until 60 $pid trained_past "$tmp/term" "$tmp/term.log" 6
term_waited=$waited
kill -TERM $pid
wait $pid
rc=$?
stopped=$(grep -o 'stopped by SIGTERM at step [0-9]*' "$tmp/term.log")
step=${stopped##* }
have=$( [ -n "$step" ] && [ -f "$tmp/term/ckpt-$(printf %08d "$step").safetensors" ] && echo 1 || echo 0)
expect sigterm_writes_checkpoint $(( rc != 143 || have != 1 || ${#term_waited} != 0 )) \
    "status $rc, '$stopped', checkpoint of that step: $have${term_waited:+; $term_waited}"
(train "$tmp/term") > "$tmp/term2.log" 2>&1
cmp -s "$(final "$tmp/ref")" "$(final "$tmp/term")"
expect sigterm_resume_identical $? "$(grep -m1 resuming "$tmp/term2.log"), final checkpoint equal to the uninterrupted run's"

# ---- a stop signal in the set-up (before the loop can checkpoint: the set-up held by a test hook):
# train ends at once, taking back the run folder it made and the parent made for it (a large model's
# set-up takes minutes on a GPU; a Ctrl-C then left a folder holding only its lock). SIGHUP and SIGTERM
# (a background job of a script ignores SIGINT) ----
for sig in TERM HUP; do
    FRAMECHAIN_TEST_SETUP_DELAY_MS=20000 "$FC" --threads 1 train --config "$TINY" --run "$tmp/setup_$sig/b/run" \
        --steps 2 > "$tmp/setup_$sig.log" 2>&1 &
    pid=$!
    wait_until 60 $pid grep -q "^test hook: the set-up held" "$tmp/setup_$sig.log"
    setup_waited=$waited
    exec 3>&2 2> /dev/null  # bash's notice of a job ended by SIGHUP goes nowhere (kill9_reap's reason)
    kill -$sig $pid
    wait $pid
    rc=$?
    exec 2>&3 3>&-
    expect "stop_signal_in_setup_leaves_nothing_$sig" $(( rc != 128 + $(kill -l $sig) || ${#setup_waited} != 0 ||
        $([ -e "$tmp/setup_$sig" ] && echo 1 || echo 0) )) \
        "status $rc; left: $(find "$tmp/setup_$sig" 2> /dev/null | tr '\n' ' ')${setup_waited:+; $setup_waited}"
done

# ---- SIGTERM while a checkpoint is being written in the background (slow writes) ----
# The loop goes on while the write runs; the stop waits for it, then writes the stop step's.
export FRAMECHAIN_TEST_WRITE_DELAY_MS=1500
bg_train "$tmp/bgterm.log" "$tmp/bgterm"
pid=$!
writing=""
wait_until 60 $pid writing_checkpoint "$tmp/bgterm" $pid || writing=""
kill -TERM $pid
wait $pid
rc=$?
unset FRAMECHAIN_TEST_WRITE_DELAY_MS
stopped=$(grep -o 'stopped by SIGTERM at step [0-9]*' "$tmp/bgterm.log")
step=${stopped##* }
stop_ckpt="$tmp/bgterm/ckpt-$(printf %08d "${step:-0}").safetensors"
"$FC" inspect "$stop_ckpt" > "$tmp/bgterm.inspect" 2>&1
good=$(( $? == 0 && $(grep -c "CRC BAD" "$tmp/bgterm.inspect") == 0 ))
was_written=$( [ -n "$writing" ] && [ -f "$tmp/bgterm/${writing%.tmp-*}" ] && echo 1 || echo 0)
left=$(ls "$tmp/bgterm" | grep -c '\.tmp-')
expect sigterm_during_background_write $(( rc != 143 || good != 1 || was_written != 1 || left != 0 )) \
    "status $rc, '$stopped' while ${writing:-nothing${waited:+ ($waited)}} was being written: that one completed: $was_written, the stop step's checks: $good, temporary files left: $left"
(train "$tmp/bgterm") > "$tmp/bgterm2.log" 2>&1
cmp -s "$(final "$tmp/ref")" "$(final "$tmp/bgterm")"
expect sigterm_during_background_write_resume_identical $? \
    "$(grep -m1 resuming "$tmp/bgterm2.log"), final checkpoint equal to the uninterrupted run's"

# ---- a flipped byte (in the middle, then the file's last: its last tensor, read last), then a ----
# ---- truncation, in the newest checkpoint: set aside, the one before resumed ----
for damage in flip flip_last truncate; do
    cp -r "$tmp/ref" "$tmp/$damage"
    f=$(final "$tmp/$damage")
    size=$(stat -c %s "$f")
    if [ $damage = flip ]; then
        flip_byte "$f" $((size / 2))
    elif [ $damage = flip_last ]; then
        flip_byte "$f" $((size - 1))
    else
        truncate -s $((size / 2)) "$f"
    fi
    (train "$tmp/$damage") > "$tmp/$damage.log" 2>&1
    rc=$?
    cmp -s "$(final "$tmp/ref")" "$f"
    same=$?
    # the damaged file is set aside under another name, never deleted, never listed again
    grep -q "renamed to $f.unusable" "$tmp/$damage.log" && [ -f "$f.unusable" ] &&
        grep -q "resuming .* from step $((STEPS - 4))" "$tmp/$damage.log"
    seen=$?
    expect "corrupt_checkpoint_${damage}_detected" $(( rc != 0 || same != 0 || seen != 0 )) \
        "$(grep -m1 -o 'ckpt-[0-9]*.safetensors: .*' "$tmp/$damage.log" | cut -c1-140); rebuilt from step $((STEPS - 4)) identically"
done

# ---- a newest checkpoint that cannot be opened (no read permission) is not damage: the resume stops
# in one line naming it, nothing renamed, no step trained again; inspect says so ----
# (root reads any file: the two runs are another user's, where the test runs as root)
noread=$(mktemp -d)  # its own folder: the other user must reach it
chmod 777 "$noread"
cp -r "$tmp/ref" "$noread/run" && chmod -R a+rwX "$noread/run"
f=$(final "$noread/run")
chmod 000 "$f"
before=$(ls "$noread/run" | tr '\n' ' ')
${as_user[@]+"${as_user[@]}"} "$FC" --threads 1 train --config "$TINY" --run "$noread/run" "${SETS[@]}" > "$noread/out" 2> "$noread/err"
rc=$?
${as_user[@]+"${as_user[@]}"} "$FC" inspect "$noread/run" > "$noread/inspect" 2>&1
rc2=$?
after=$(ls "$noread/run" | tr '\n' ' ')
[ $rc = 1 ] && [ $rc2 = 1 ] && [ "$(wc -l < "$noread/err")" = 1 ] && grep -q "$f: cannot open: Permission denied; not set aside" "$noread/err" &&
    [ "$before" = "$after" ] && ! grep -q resuming "$noread/out" && grep -q "^UNREADABLE: .*a rerun of train stops at it" "$noread/inspect"
expect unreadable_checkpoint_not_set_aside $? "status $rc ($(cut -c1-130 "$noread/err")); inspect status $rc2; the folder as it was: $([ "$before" = "$after" ] && echo yes || echo "no: $after")"
chmod 644 "$f"
rm -rf "$noread"

# ---- inspect RUN with a link to nothing named like a checkpoint (a disk not mounted) under a damaged
# newer one: each named once (the link's ENOENT made inspect list the folder again, 100 times, each
# time naming the damaged one again) ----
cp -r "$tmp/ref" "$tmp/dangling"
head -c 1000 "$(final "$tmp/ref")" > "$tmp/dangling/ckpt-00000099.safetensors"
ln -s nowhere "$tmp/dangling/ckpt-00000098.safetensors"
"$FC" inspect "$tmp/dangling" > "$tmp/dangling.log" 2>&1
rc=$?
[ $rc = 1 ] && [ "$(grep -c '^UNUSABLE: .*ckpt-00000099' "$tmp/dangling.log")" = 1 ] &&
    [ "$(grep -c '^UNUSABLE: .*ckpt-00000098.safetensors: cannot open: No such file' "$tmp/dangling.log")" = 1 ] &&
    grep -q "^a rerun of train resumes from: .*ckpt-$(printf %08d $STEPS)" "$tmp/dangling.log"
expect inspect_dangling_link_named_once $? "status $rc; UNUSABLE lines: $(grep -c '^UNUSABLE' "$tmp/dangling.log"); $(grep -m1 '^a rerun' "$tmp/dangling.log" | cut -c1-120)"

# ---- a metrics.jsonl line too long to hold in memory (1 GiB of NUL bytes after the run's lines, read
# under ulimit -v): glibc's getline then returns -1 with ENOMEM, which was taken for the file's end:
# inspect showed the file as whole (status 0), and a resume's cut-back rewrote it without the rest.
# Now both stop with one line, the file as it was ----
if (ulimit -v 4000000; "$FC" --version) 2>&1 | grep -q AddressSanitizer; then
    echo "SKIP metrics_line_past_memory: the sanitizers' shadow memory does not run under ulimit -v"
else
    cp -r "$tmp/ref" "$tmp/hugeline"
    truncate -s 1G "$tmp/hugeline/metrics.jsonl"
    (ulimit -v 700000; exec "$FC" --threads 1 inspect "$tmp/hugeline") > "$tmp/hugeline.out" 2> "$tmp/hugeline.err"
    rc=$?
    (ulimit -v 700000; exec "$FC" --threads 1 train --config "$TINY" --run "$tmp/hugeline" "${SETS[@]}" --extend --steps $((STEPS + 4))) \
        > /dev/null 2> "$tmp/hugeline2.err"
    rc2=$?
    [ $rc = 1 ] && [ $rc2 = 1 ] && grep -q "metrics.jsonl: cannot read: Cannot allocate memory" "$tmp/hugeline.err" &&
        grep -q "metrics.jsonl: cannot read: Cannot allocate memory" "$tmp/hugeline2.err" &&
        [ "$(stat -c %s "$tmp/hugeline/metrics.jsonl")" = 1073741824 ]
    expect metrics_line_past_memory $? "inspect status $rc ($(tail -1 "$tmp/hugeline.err" | cut -c1-100)); train status $rc2; the file's size after: $(stat -c %s "$tmp/hugeline/metrics.jsonl")"
    rm -rf "$tmp/hugeline"
fi

# ---- files named like newer checkpoints that are not: never counted as the ones pruning keeps ----
# (three 1000-byte ckpt-0000009{7,8,9}; the run resumes from step 52 and writes 56 and 60, keeping 3)
cp -r "$tmp/ref" "$tmp/junk"
rm "$tmp/junk/ckpt-00000056.safetensors" "$(final "$tmp/junk")"
for s in 97 98 99; do head -c 1000 /dev/urandom > "$tmp/junk/ckpt-000000$s.safetensors"; done
(train "$tmp/junk") > "$tmp/junk.log" 2>&1
rc=$?
kept=$(cd "$tmp/junk" && ls ckpt-*.safetensors | tr '\n' ' ')
aside=$(ls "$tmp/junk" | grep -c '\.unusable$')
cmp -s "$(final "$tmp/ref")" "$(final "$tmp/junk")"
same=$?
expect prune_keeps_good_checkpoints $(( rc != 0 || same != 0 || aside != 3 )) \
    "status $rc; kept: ${kept:-none}; set aside as .unusable: $aside of 3; the final checkpoint equals the uninterrupted run's"
[ "$kept" = "ckpt-00000052.safetensors ckpt-00000056.safetensors ckpt-00000060.safetensors " ]
expect prune_keeps_newest_three $? "kept: $kept"

# ---- a disk that fails half-way through a checkpoint ----
cp -r "$tmp/ref" "$tmp/full"
rm "$(final "$tmp/full")"
prev="$tmp/full/ckpt-$(printf %08d $((STEPS - 4))).safetensors"
cp "$prev" "$tmp/prev.copy"
(FRAMECHAIN_TEST_FAIL_WRITE_AFTER=100000 train "$tmp/full") > "$tmp/full.log" 2>&1
rc=$?
msg=$(grep -m1 "checkpoint at step" "$tmp/full.log")
cmp -s "$prev" "$tmp/prev.copy"
intact=$?
left=$(ls "$tmp/full" | grep -c '\.tmp-')
expect failed_write_keeps_previous $(( rc == 0 || intact != 0 || left != 0 || $(echo "$msg" | grep -c 'No space left') != 1 )) \
    "status $rc, '$msg', previous checkpoint intact: $((1 - intact)), temporary files left: $left"

# A background write that fails stops the run at the next step, not at the end.
(FRAMECHAIN_TEST_FAIL_WRITE_AFTER=100000 train "$tmp/full2") > "$tmp/full2.log" 2>&1
rc=$?
msg=$(grep -m1 "checkpoint at step" "$tmp/full2.log")
lines=$(wc -l < "$tmp/full2/metrics.jsonl")
n_files=$(ls "$tmp/full2" | grep -c '^ckpt-')
expect failed_background_write_stops_run $(( rc == 0 || lines > 8 || n_files != 0 || $(echo "$msg" | grep -c 'checkpoint at step 4 failed: .*No space left.*(the earlier checkpoints are untouched)') != 1 )) \
    "status $rc, '$msg', stopped after step $lines, checkpoint or temporary files left: $n_files"

# ---- a metrics line that cannot be written stops the run ----
# (a file-size limit of 4 KiB, with SIGXFSZ ignored, stands in for a full disk: the 17th line or so
# fails with EFBIG; the output goes through a pipe, which the limit does not cover)
(trap '' XFSZ; ulimit -f 4; train "$tmp/mfull" --set checkpoint_every=1000) 2>&1 | cat > "$tmp/mfull.log"
rc=${PIPESTATUS[0]}
msg=$(grep -m1 -o "metrics.jsonl: cannot write the line of step [0-9]*: .*" "$tmp/mfull.log")
stopped=$(echo "$msg" | sed -n 's/.*of step \([0-9]*\).*/\1/p')
expect metrics_write_failure_stops $(( rc == 0 || ${#msg} == 0 || ${stopped:-99} > 30 )) \
    "status $rc, '${msg:0:120}'"
# what is left ends at the last whole line (no half record for the next start to call torn), and the
# same command goes on from it without a word about junk
torn=$(tail -c 1 "$tmp/mfull/metrics.jsonl" | od -An -c | tr -d ' ')
whole=$(grep -c '^{"step":[0-9]*,.*}$' "$tmp/mfull/metrics.jsonl")
lines=$(wc -l < "$tmp/mfull/metrics.jsonl")
(train "$tmp/mfull" --set checkpoint_every=1000) > "$tmp/mfull2.log" 2>&1
rc2=$?
expect metrics_write_failure_leaves_whole_lines $(( ${stopped:-0} < 2 || lines != stopped - 1 || whole != lines || rc2 != 0 ||
        $(grep -c 'junk' "$tmp/mfull2.log") != 0 )) \
    "last byte '$torn', $whole of $lines lines whole records (stopped at step ${stopped:-?}); the rerun: status $rc2, $(grep -m1 -o 'left out.*' "$tmp/mfull2.log" || echo 'no line about junk')"

# ---- a NaN loss stops the run; the last good checkpoint stays ----
# (a NaN pixel in the data of step 23, through the fault-injection hook)
(FRAMECHAIN_TEST_NAN_AT_STEP=23 train "$tmp/nan") > "$tmp/nan.log" 2>&1
rc=$?
msg=$(grep -m1 -o "the loss is .*" "$tmp/nan.log")
ls "$tmp/nan" > "$tmp/nan.ls"
"$FC" inspect "$tmp/nan/ckpt-00000020.safetensors" > /dev/null 2>&1
good=$?
expect nan_loss_stops $(( rc == 0 || ${#msg} == 0 || good != 0 )) "status $rc, '$msg', ckpt-00000020 checks: $((1 - good))"

# ---- checkpoints that do not continue this run are refused ----
cp -r "$tmp/ref" "$tmp/other"
before=$(ls -l --time-style=+%s.%N "$tmp/other" | md5sum)
(train "$tmp/other" --set width=96 --set steps=80) > "$tmp/other.log" 2>&1
rc=$?
after=$(ls -l --time-style=+%s.%N "$tmp/other" | md5sum)
# width shapes the network, which a fork keeps: the line says how to go on (the config file changed
# since the run started?), not to fork
expect refuses_other_config $(( rc == 0 || $(grep -c "written with width = 64, but this run has width = 96; .*give --set width=64 to go on" "$tmp/other.log") != 1 ||
    $(grep -c -- "--from" "$tmp/other.log") != 0 )) \
    "status $rc, $(tail -1 "$tmp/other.log" | cut -c1-120)"
expect refusal_changes_nothing $([ "$before" = "$after" ]; echo $?) "the run folder is unchanged"
# keys that do not shape the network: all of them in the one line, with the --set of each checkpoint's
# value (a config file that gained keys since the run started) and the fork; the --set given goes on
(train "$tmp/other" --set lr=2e-3 --set weight_decay=0.05) > "$tmp/other2.log" 2>&1
rc=$?
wd=$("$FC" inspect --config "$TINY" | sed -n 's/^weight_decay *= *\([^ ]*\).*/\1/p')
go_on=$(grep -o 'give --set [^)]* to go on as it was' "$tmp/other2.log" | sed 's/^give //; s/ to go on as it was$//')
read -ra go_on_args <<< "$go_on"
(train "$tmp/other" "${go_on_args[@]}") > "$tmp/other3.log" 2>&1
rc3=$?
expect refusal_names_every_key $(( rc == 0 || rc3 != 0 || $(grep -c "written with lr = 0.001, weight_decay = ${wd:-?}, but this run has lr = 0.002, weight_decay = 0.05; .*give --set lr=0.001 --set weight_decay=${wd:-?} to go on as it was; train --from .*ckpt-00000060.safetensors --run NEW --set lr=0.002 --set weight_decay=0.05 forks it)$" "$tmp/other2.log") != 1 ||
    $(grep -c 'nothing to do' "$tmp/other3.log") != 1 )) \
    "status $rc, $(tail -1 "$tmp/other2.log" | cut -c1-300); the --set given ('$go_on'): status $rc3, $(tail -1 "$tmp/other3.log")"
# a value longer than 255 bytes (a plan of 32 slots) differing at its end: named whole, with a --set that
# goes on when pasted (cut at 255 bytes, the two compared equal: a line that named no key)
P1="anchor:0"; for i in $(seq 1 31); do P1="$P1 target:$i"; done
P2="${P1% target:31} target:32"
"$FC" --threads 1 train --config "$TINY" --run "$tmp/longplan" --steps 1 --set sample_every=0 --set "plan=$P1" > /dev/null 2>&1
"$FC" --threads 1 train --config "$TINY" --run "$tmp/longplan" --steps 1 --set sample_every=0 --set "plan=$P2" > "$tmp/lp.log" 2>&1
rc=$?
pasted=$(grep -o "give --set 'plan=[^']*' to go on" "$tmp/lp.log" | sed "s/^give --set '//; s/' to go on$//")
"$FC" --threads 1 train --config "$TINY" --run "$tmp/longplan" --steps 1 --set sample_every=0 --set "$pasted" > "$tmp/lp2.log" 2>&1
rc2=$?
expect refusal_names_long_value $(( rc == 0 || rc2 != 0 || $(grep -cF "written with plan = $P1, but this run has plan = $P2;" "$tmp/lp.log") != 1 )) \
    "status $rc: $(tail -1 "$tmp/lp.log" | tail -c 200); pasted: status $rc2, $(tail -1 "$tmp/lp2.log" | cut -c1-100)"
cp -r "$tmp/ref" "$tmp/noopt"
"$PYTHON" - "$(final "$tmp/noopt")" <<'PY'
import sys
sys.path.insert(0, "tools")
from safetensors_io import read_safetensors, write_safetensors
tensors, meta = read_safetensors(sys.argv[1])
write_safetensors(sys.argv[1], {k: v for k, v in tensors.items() if not k.startswith("optim.")}, meta)
PY
(train "$tmp/noopt") > "$tmp/noopt.log" 2>&1
rc=$?
expect refuses_checkpoint_without_optimizer_state $(( rc == 0 || $(grep -c "has no optimizer state" "$tmp/noopt.log") != 1 )) \
    "status $rc, $(tail -1 "$tmp/noopt.log" | cut -c1-120)"

# ---- NaN weights behind CRCs that check: resume goes back one checkpoint, generate refuses them ----
cp -r "$tmp/ref" "$tmp/nanw"
"$PYTHON" - "$(final "$tmp/nanw")" <<'PY'
import sys, zlib
sys.path.insert(0, "tools")
import numpy as np
from safetensors_io import read_safetensors, write_safetensors
tensors, meta = read_safetensors(sys.argv[1])
for name in ("model.patch_embed.weight", "ema.patch_embed.weight"):
    t = tensors[name].copy()
    t.flat[3] = np.nan
    tensors[name] = t
    meta["crc32." + name] = "%08x" % zlib.crc32(t.tobytes())
write_safetensors(sys.argv[1], tensors, meta)
PY
mkdir "$tmp/nanonly" && cp "$(final "$tmp/nanw")" "$tmp/nanonly/"
(train "$tmp/nanw") > "$tmp/nanw.log" 2>&1
rc=$?
cmp -s "$(final "$tmp/ref")" "$(final "$tmp/nanw")"
same=$?
expect nan_weights_skipped_on_resume $(( rc != 0 || same != 0 || $(grep -c "tensor model.patch_embed.weight holds NaN values: the weights are unusable; renamed to" "$tmp/nanw.log") != 1 || $(grep -c "resuming .* from step $((STEPS - 4))" "$tmp/nanw.log") != 1 )) \
    "status $rc, $(grep -m1 -o 'resuming.*from step [0-9]*' "$tmp/nanw.log"), set aside: $(ls "$tmp/nanw" | grep -c unusable); final checkpoint equal to the uninterrupted run's: $((1 - same))"
"$FC" generate --starter "$tmp/nanonly" --extrapolate "$tmp/nanonly" --interpolate "$tmp/nanonly" \
    --first-frame shapes:1 --frames 9 --out "$tmp/nan.gif" > "$tmp/nangen.log" 2>&1
rc=$?
expect nan_weights_not_generated $(( rc == 0 || $(grep -c "patch_embed.weight holds NaN values" "$tmp/nangen.log") != 1 )) \
    "status $rc, $(grep -m1 -o '[a-z]*.patch_embed.weight holds.*' "$tmp/nangen.log" | cut -c1-80), output written: $([ -e "$tmp/nan.gif" ] && echo yes || echo no)"

# ---- other checkpoints whose CRCs check: NaN in the EMA alone is set aside as NaN in the weights is; a
# tensor of the right type and the wrong size, and a newer format version, are refused in one line, the
# file left as it is ----
for k in emanan short newer; do cp -r "$tmp/ref" "$tmp/$k"; done
"$PYTHON" - "$(final "$tmp/emanan")" "$(final "$tmp/short")" "$(final "$tmp/newer")" <<'PY'
import sys, zlib
sys.path.insert(0, "tools")
import numpy as np
from safetensors_io import read_safetensors, write_safetensors
def edit(path, change):
    tensors, meta = read_safetensors(path)
    change(tensors, meta)
    if "crc32.__metadata__" in meta:  # the metadata's CRC (README, "Checkpoints") made to check again
        meta["crc32.__metadata__"] = "%08x" % zlib.crc32(b"".join(
            k.encode() + b"\0" + v.encode() + b"\0" for k, v in sorted(meta.items()) if not k.startswith("crc32.")))
    write_safetensors(path, tensors, meta)
def put(tensors, meta, name, t):
    tensors[name] = t
    meta["crc32." + name] = "%08x" % zlib.crc32(t.tobytes())
def ema_nan(tensors, meta):
    t = tensors["ema.patch_embed.weight"].copy()
    t.flat[3] = np.nan
    put(tensors, meta, "ema.patch_embed.weight", t)
def short(tensors, meta):  # one value fewer, stored as it says (shape and CRC agree)
    put(tensors, meta, "model.patch_embed.weight", tensors["model.patch_embed.weight"].reshape(-1)[:-1].copy())
def newer(tensors, meta):
    meta["format_version"] = str(int(meta["format_version"]) + 1)
edit(sys.argv[1], ema_nan)
edit(sys.argv[2], short)
edit(sys.argv[3], newer)
PY
(train "$tmp/emanan") > "$tmp/emanan.log" 2>&1
rc=$?
expect ema_nan_skipped_on_resume $(( rc != 0 || $(grep -c "tensor ema.patch_embed.weight holds NaN values: the weights are unusable; renamed to" "$tmp/emanan.log") != 1 || $(grep -c "resuming .* from step $((STEPS - 4))" "$tmp/emanan.log") != 1 )) \
    "status $rc, $(grep -m1 -o 'resuming.*from step [0-9]*' "$tmp/emanan.log"), set aside: $(ls "$tmp/emanan" | grep -c unusable)"
for k in short newer; do
    cp "$(final "$tmp/$k")" "$tmp/$k.before"
    (train "$tmp/$k") > "$tmp/$k.log" 2>&1
    rc=$?
    case $k in
        short) want="tensor model.patch_embed.weight is F32 of [0-9]* bytes, expected F32 of [0-9]*" ;;
        newer) want="checkpoint format version [0-9]*; this framechain reads version [0-9]*" ;;
    esac
    cmp -s "$(final "$tmp/$k")" "$tmp/$k.before"
    kept=$?
    expect "checkpoint_${k}_refused" $(( rc == 0 || kept != 0 || $(grep -c "$want" "$tmp/$k.log") != 1 )) \
        "status $rc, '$(grep -m1 -o "$want" "$tmp/$k.log")', the file unchanged: $((1 - kept))"
done

# a checkpoint under another step's name (a copy, a rename by hand) is set aside, not resumed from as that step
cp -r "$tmp/ref" "$tmp/renamed"
cp "$(final "$tmp/renamed")" "$tmp/renamed/ckpt-$(printf %08d $((STEPS + 4))).safetensors"
(train "$tmp/renamed") > "$tmp/renamed.log" 2>&1
rc=$?
expect checkpoint_other_name_set_aside $(( rc != 0 || $(grep -c "ckpt-$(printf %08d $((STEPS + 4))).safetensors: its metadata says step $STEPS; renamed to" "$tmp/renamed.log") != 1 || $(grep -c "resuming .* from step $STEPS " "$tmp/renamed.log") != 1 )) \
    "status $rc, $(grep -m1 -o 'its metadata says step [0-9]*' "$tmp/renamed.log"), $(grep -m1 -o 'resuming.*from step [0-9]*' "$tmp/renamed.log")"

# A metrics.jsonl that cannot be rewritten (a 4 KiB file-size limit): one line, with what to do about
# that error (not "free space" whatever the error), and no metrics.jsonl.tmp left behind.
cp -r "$tmp/ref" "$tmp/mtmp"
rm "$(final "$tmp/mtmp")"
(trap '' XFSZ; ulimit -f 4; train "$tmp/mtmp") > "$tmp/mtmp.log" 2>&1
rc=$?
expect metrics_rewrite_failure_leaves_no_temp $(( rc == 0 || $(grep -c "metrics.jsonl: cannot rewrite: File too large; .*whole: raise the limit on file sizes (ulimit -f), then run the same command" "$tmp/mtmp.log") != 1 ||
    $(ls "$tmp/mtmp" | grep -c 'metrics.jsonl.tmp') != 0 )) \
    "status $rc, $(grep -m1 -o 'metrics.jsonl: cannot rewrite.*' "$tmp/mtmp.log" | cut -c1-100); left: $(ls "$tmp/mtmp" | grep tmp)"

# ---- recompute changes the memory a step takes, not its arithmetic ----
same_tensors() {  # same_tensors A B: every tensor of two checkpoints byte for byte (their configs differ)
    "$PYTHON" - "$1" "$2" <<'PY'
import sys
sys.path.insert(0, "tools")
from safetensors_io import read_safetensors
a, _ = read_safetensors(sys.argv[1])
b, _ = read_safetensors(sys.argv[2])
sys.exit(0 if a.keys() == b.keys() and all(a[k].tobytes() == b[k].tobytes() for k in a) else 1)
PY
}
(train "$tmp/rc" --set recompute=1) > "$tmp/rc.log" 2>&1
rc=$?
cmp -s <(losses "$tmp/ref") <(losses "$tmp/rc")
same_losses=$?
same_tensors "$(final "$tmp/ref")" "$(final "$tmp/rc")"
same=$?
expect recompute_same_run $(( rc != 0 || same_losses != 0 || same != 0 )) \
    "status $rc; recompute = 1 gives the per-step losses and the final weights, EMA and optimizer state of recompute = 0"
cp -r "$tmp/ref" "$tmp/rcres"
rm "$(final "$tmp/rcres")"
(train "$tmp/rcres" --set recompute=2 --set keep_blocks=1) > "$tmp/rcres.log" 2>&1
rc=$?
same_tensors "$(final "$tmp/ref")" "$(final "$tmp/rcres")"
same=$?
expect resume_across_recompute $(( rc != 0 || same != 0 || $(grep -c "resuming .* from step $((STEPS - 4))" "$tmp/rcres.log") != 1 )) \
    "status $rc, $(grep -m1 -o 'resuming.*' "$tmp/rcres.log"), recompute 2, last block kept, on a recompute 0 run: the same tensors"

# ---- keys that vary footage but cannot act here are said, not silently dropped ----
"$FC" --threads 1 prepare --input shapes:2:12 --out "$tmp/short12" --size 32 --clip-frames 12 > /dev/null 2>&1
"$FC" --threads 1 train --config "$TINY" --run "$tmp/fast12" --data "$tmp/short12" --steps 1 --set fast_fraction=0.5 \
    > "$tmp/fast12.log" 2>&1
rc=$?
grep -q "^framechain: warning: fast_fraction 0.5: not used: the plan spans 7 frames, 13 at 2x speed, and the clips of .*short12 have 12: every window plays at 1x (prepare the footage with --clip-frames 13 or more for it)$" "$tmp/fast12.log"
expect train_fast_fraction_unused_said $(( rc != 0 || $? != 0 )) "status $rc: $(grep -m1 'fast_fraction' "$tmp/fast12.log" || echo 'no line')"
"$FC" --threads 1 train --config "$TINY" --run "$tmp/fastshapes" --steps 1 --set fast_fraction=0.5 --set crop_zoom=2 \
    > "$tmp/fastshapes.log" 2>&1
rc=$?
grep -q "^framechain: warning: fast_fraction and crop_zoom: not used: they vary the footage of train --data, and this run trains on the built-in moving shapes$" "$tmp/fastshapes.log"
expect train_footage_keys_on_shapes_said $(( rc != 0 || $? != 0 )) "status $rc: $(grep -m1 'not used' "$tmp/fastshapes.log" || echo 'no line')"

# ---- 8-bit AdamW tracks fp32 AdamW on the tiny config ----
for opt in adamw adamw8bit; do
    "$FC" --threads 2 train --config "$TINY" --run "$tmp/$opt" --set optimizer=$opt --set steps=200 --set warmup_steps=10 \
        --set lr=1e-3 --set checkpoint_every=50 --set keep_checkpoints=10 > "$tmp/$opt.log" 2>&1
done
"$PYTHON" tools/compare_runs.py "$tmp/adamw" "$tmp/adamw8bit" --window 20 --params-step 50 > "$tmp/cmp.log" 2>&1
rc=$?
cat "$tmp/cmp.log" | sed 's/^/  /'
expect adamw8bit_tracks_fp32 $rc "$(grep -E '^(curve|params):' "$tmp/cmp.log" | tr '\n' ' ')"
exit 0
