#!/usr/bin/env bash
# The run folder: one trainer per folder (its lock, two starts racing), folders that are not the run's
# to make or share (a plain file, a FIFO or a link to nowhere on the path, another user's), and the
# permissions the umask gives its files.
set -u
. "$(dirname "$0")/../lib.sh"
TINY=configs/tiny/starter.conf
SETS=(--set steps=60 --set checkpoint_every=4 --set keep_checkpoints=3 --set warmup_steps=5 --set lr=1e-3)
. "$(dirname "$0")/train_lib.sh"  # train RUN ..., bg_train LOG RUN ...

# ---- one trainer per run folder ----
# (the second started once the first has written a checkpoint, of another steps: the lock is said, not
# the config of a checkpoint that is the other run's; which one was said hung on the machine's speed)
bg_train "$tmp/lock1.log" "$tmp/lock" --set steps=100000
pid=$!
wait_until 60 $pid have "$tmp/lock/ckpt-*.safetensors"  # training: it holds the lock
(train "$tmp/lock") > "$tmp/lock.log" 2>&1
rc=$?
kill9_reap $pid
expect one_trainer_per_run $(( rc == 0 || ${#waited} != 0 || $(grep -c "another framechain train is using" "$tmp/lock.log") != 1 )) \
    "status $rc: $(grep -m1 '^framechain' "$tmp/lock.log" | cut -c1-140)${waited:+; the first trainer: $waited}"

# two trains started at once on a folder that does not exist yet: one trains, the other is refused by
# the lock and leaves the winner's folder and lock alone (the refused one removed them at its exit, as
# if it had made the folder, in about half the tries: the winner then died). 8 tries.
bad_tries=""
for try in 1 2 3 4 5 6 7 8; do
    bg_train "$tmp/race$try.a.log" "$tmp/race$try" --steps 3
    pa=$!
    bg_train "$tmp/race$try.b.log" "$tmp/race$try" --steps 3
    pb=$!
    wait $pa; ra=$?
    wait $pb; rb=$?
    ok=$(( (ra == 0 && rb == 1) || (ra == 1 && rb == 0) ))
    [ $ok = 1 ] && [ -f "$tmp/race$try/ckpt-00000003.safetensors" ] &&
        [ "$(cat "$tmp/race$try.a.log" "$tmp/race$try.b.log" | grep -c 'another framechain train is using')" = 1 ] ||
        bad_tries="$bad_tries $try (status $ra/$rb: $(cat "$tmp/race$try.a.log" "$tmp/race$try.b.log" | grep -m1 '^framechain' | cut -c1-120))"
done
expect two_trainers_race_new_folder $([ -z "$bad_tries" ]; echo $?) "${bad_tries:-8 of 8 tries: one trained to step 3, the other refused by the lock}"

# a run folder renamed while its train runs, and another run's folder put at its name: the train stops
# at its next checkpoint, naming where its folder went (its checkpoints and their pruning had gone into
# the other run's folder, deleting that run's checkpoints, and it exited 0)
QUICK=(--set depth=1 --set frame_size=16 --set mlp_ratio=1 --set warmup_steps=2)
"$FC" --threads 1 train --config "$TINY" --run "$tmp/mv_other" "${QUICK[@]}" --set steps=3 --set checkpoint_every=1 \
    --set keep_checkpoints=3 > /dev/null 2>&1
other=$(cat "$tmp/mv_other"/ckpt-*.safetensors | md5sum)
"$FC" --threads 1 train --config "$TINY" --run "$tmp/mv" "${QUICK[@]}" --set steps=3000 --set checkpoint_every=100 \
    --set keep_checkpoints=1 > "$tmp/mv.log" 2>&1 &
pid=$!
wait_until 60 $pid trained_past "$tmp/mv" "$tmp/mv.log" 1
mv "$tmp/mv" "$tmp/mv_moved" && mv "$tmp/mv_other" "$tmp/mv"  # another run's folder takes the name
wait $pid
rc=$?
expect renamed_run_folder_stops_the_train $(( rc != 1 || ${#waited} != 0 ||
    $(grep -c "^framechain: $tmp/mv: the run folder was moved or replaced while this train ran: stopping; its checkpoints are in the folder it was moved to, $tmp/mv_moved " "$tmp/mv.log") != 1 )) \
    "status $rc: $(grep -m1 '^framechain: ' "$tmp/mv.log" | cut -c1-200)${waited:+ ($waited)}"
[ "$(cat "$tmp/mv"/ckpt-*.safetensors | md5sum)" = "$other" ] && [ "$(ls -A "$tmp/mv" | tr '\n' ' ')" = ".lock ckpt-00000001.safetensors ckpt-00000002.safetensors ckpt-00000003.safetensors metrics.jsonl " ]
expect renamed_run_folder_leaves_the_new_one_alone $? "the folder now at its name holds: $(ls -A "$tmp/mv" | tr '\n' ' ')"
# the same while a checkpoint is being checked and written (the folder was checked once, before: a move
# after it sent the file onto the other run's checkpoint of that step, and the pruning deleted its
# others): checked again before the rename and the pruning, nothing of the other run touched.
# FRAMECHAIN_TEST_CKPT_STAGE_DELAY_MS stands for the seconds a large checkpoint's checks take.
"$FC" --threads 1 train --config "$TINY" --run "$tmp/mvw_other" "${QUICK[@]}" --set steps=3 --set checkpoint_every=1 \
    --set keep_checkpoints=3 > /dev/null 2>&1
other=$(cat "$tmp/mvw_other"/ckpt-*.safetensors | md5sum)
FRAMECHAIN_TEST_CKPT_STAGE_DELAY_MS=4000 "$FC" --threads 1 train --config "$TINY" --run "$tmp/mvw" "${QUICK[@]}" \
    --set steps=3000 --set checkpoint_every=2 --set keep_checkpoints=1 > "$tmp/mvw.log" 2>&1 &
pid=$!
wait_until 60 $pid trained_past "$tmp/mvw" "$tmp/mvw.log" 3
mv "$tmp/mvw" "$tmp/mvw_moved" && mv "$tmp/mvw_other" "$tmp/mvw"
wait $pid
rc=$?
expect renamed_mid_checkpoint_stops_the_train $(( rc != 1 || ${#waited} != 0 ||
    $(grep -c "^framechain: $tmp/mvw: the run folder was moved or replaced while this train ran: stopping; its checkpoints are in the folder it was moved to, $tmp/mvw_moved " "$tmp/mvw.log") != 1 )) \
    "status $rc: $(grep -m1 '^framechain: ' "$tmp/mvw.log" | cut -c1-200)${waited:+ ($waited)}"
[ "$(cat "$tmp/mvw"/ckpt-*.safetensors | md5sum)" = "$other" ] && [ "$(ls -A "$tmp/mvw" | tr '\n' ' ')" = ".lock ckpt-00000001.safetensors ckpt-00000002.safetensors ckpt-00000003.safetensors metrics.jsonl " ]
expect renamed_mid_checkpoint_leaves_the_new_one_alone $? "the folder now at its name holds: $(ls -A "$tmp/mvw" | tr '\n' ' ')"
# the same before a preview, which would go into RUN/samples
mkdir "$tmp/other_pv"
"$FC" --threads 1 train --config "$TINY" --run "$tmp/mv_pv" "${QUICK[@]}" --set steps=3000 --set checkpoint_every=1000 \
    --set sample_every=50 > "$tmp/mv_pv.log" 2>&1 &
pid=$!
wait_until 60 $pid trained_past "$tmp/mv_pv" "$tmp/mv_pv.log" 1
mv "$tmp/mv_pv" "$tmp/mv_pv_moved" && mv "$tmp/other_pv" "$tmp/mv_pv"
wait $pid
rc=$?
expect renamed_run_folder_stops_before_preview $(( rc != 1 || ${#waited} != 0 || $(ls -A "$tmp/mv_pv" | wc -l) != 0 ||
    $(grep -c "^framechain: $tmp/mv_pv: the run folder was moved or replaced while this train ran" "$tmp/mv_pv.log") != 1 )) \
    "status $rc: $(grep -m1 '^framechain: ' "$tmp/mv_pv.log" | cut -c1-120); the folder now at its name holds: $(ls -A "$tmp/mv_pv" | tr '\n' ' ')"

# the run's lock file removed while it trains (a cleanup script): it stops at its next checkpoint saying
# so, the folder not called moved; the same command goes on from the checkpoints
"$FC" --threads 1 train --config "$TINY" --run "$tmp/rmlock" "${QUICK[@]}" --set steps=3000 --set checkpoint_every=100 \
    > "$tmp/rmlock.log" 2>&1 &
pid=$!
wait_until 60 $pid trained_past "$tmp/rmlock" "$tmp/rmlock.log" 1
rm "$tmp/rmlock/.lock"
wait $pid
rc=$?
expect removed_lock_file_said $(( rc != 1 || ${#waited} != 0 ||
    $(grep -c "^framechain: $tmp/rmlock/.lock: the run's lock file was removed while this train ran: stopping" "$tmp/rmlock.log") != 1 )) \
    "status $rc: $(grep -m1 '^framechain: ' "$tmp/rmlock.log" | cut -c1-160)${waited:+ ($waited)}"

# ---- folders that are not the run's to make or share ----
# a dataset a prepare is writing (its lock, its shards), or one whose prepare was cut off (shards, no
# dataset.json): refused as a whole dataset is, the folder left as it was
mkdir -p "$tmp/preparing" "$tmp/cut_prep"
: > "$tmp/preparing/.prepare.lock"
: > "$tmp/preparing/shard-00000.safetensors"
: > "$tmp/cut_prep/shard-00000.safetensors"
ok=0
for d in preparing cut_prep; do
    "$FC" --threads 1 train --config "$TINY" --run "$tmp/$d" "${QUICK[@]}" --set steps=2 > "$tmp/$d.log" 2>&1
    rc=$?
    held=$([ $d = preparing ] && echo .prepare.lock || echo "shard files")
    { [ $rc = 1 ] && [ "$(grep -c "^framechain: $tmp/$d: holds $held: a dataset a prepare is writing (or one whose prepare was cut off), not a run folder (give --run a folder of its own)$" "$tmp/$d.log")" = 1 ] &&
      [ "$(ls -A "$tmp/$d" | tr '\n' ' ')" = "$( [ $d = preparing ] && echo '.prepare.lock ')shard-00000.safetensors " ]; } ||
        { ok=1; echo "  $d: status $rc: $(grep -m1 '^framechain: ' "$tmp/$d.log" | cut -c1-160); holds $(ls -A "$tmp/$d" | tr '\n' ' ')"; }
done
expect train_refuses_dataset_being_prepared $ok "$(grep -m1 '^framechain: ' "$tmp/preparing.log" | cut -c1-160)"
# --extend of a run another train is using: the lock is said (not what the checkpoints, which that
# train writes and prunes meanwhile, held at the moment they were listed)
"$FC" --threads 1 train --config "$TINY" --run "$tmp/busy" "${QUICK[@]}" --set steps=100000 --set checkpoint_every=100000 \
    > "$tmp/busy1.log" 2>&1 &
pid=$!
wait_until 60 $pid trained_past "$tmp/busy" "$tmp/busy1.log" 1
"$FC" --threads 1 train --config "$TINY" --run "$tmp/busy" "${QUICK[@]}" --extend --steps 200000 > "$tmp/busy2.log" 2>&1
rc=$?
kill9_reap $pid
expect extend_busy_run_says_lock $(( rc != 1 || ${#waited} != 0 ||
    $(grep -c "^framechain: $tmp/busy: another framechain train is using this run folder$" "$tmp/busy2.log") != 1 )) \
    "status $rc: $(grep -m1 '^framechain: ' "$tmp/busy2.log" | cut -c1-160)${waited:+ ($waited)}"
# a name the file system cannot take, deep in a long path: the line keeps its reason whole, and the
# parents made for it go (a refused start leaves nothing on disk)
deep="$tmp/deep"
for i in $(seq 16); do deep="$deep/$(printf 'd%.0s' $(seq 200))"; done
deep="$deep/$(printf 'r%.0s' $(seq 300))"
"$FC" --threads 1 train --config "$TINY" --run "$deep" "${QUICK[@]}" --set steps=2 > "$tmp/deep.log" 2>&1
rc=$?
expect train_long_path_says_why $(( rc != 1 || $(grep -c "^framechain: $deep: cannot create folder: File name too long$" "$tmp/deep.log") != 1 )) \
    "status $rc (a path of ${#deep} bytes): ...$(grep -m1 '^framechain: ' "$tmp/deep.log" | tail -c 80)"
[ ! -e "$tmp/deep" ]
expect train_long_name_leaves_no_folder $? "left: $(find "$tmp/deep" 2> /dev/null | wc -l) folders"
# --run under a file, or through a link whose target is gone: the line names the part that is no folder
echo text > "$tmp/plainfile"
ln -s "$tmp/gone" "$tmp/danglink"
(train "$tmp/plainfile/run") > "$tmp/underfile.log" 2>&1
rc=$?
(train "$tmp/danglink") > "$tmp/dang.log" 2>&1
rc2=$?
mkfifo "$tmp/fifo"
(train "$tmp/fifo/run") > "$tmp/underfifo.log" 2>&1
rc3=$?
(train "$tmp/danglink/sub/run") > "$tmp/dangsub.log" 2>&1
rc4=$?
expect train_run_under_a_file_named $(( rc != 1 || rc2 != 1 || rc3 != 1 || rc4 != 1 ||
        $(grep -c "^framechain: $tmp/fifo: a FIFO, not a folder, in $tmp/fifo/run$" "$tmp/underfifo.log") != 1 ||
        $(grep -c "^framechain: $tmp/danglink: a link to $tmp/gone, which does not exist, in $tmp/danglink/sub$" "$tmp/dangsub.log") != 1 ||
        $(grep -c "^framechain: $tmp/plainfile: a file, not a folder, in $tmp/plainfile/run$" "$tmp/underfile.log") != 1 ||
        $(grep -c "^framechain: $tmp/danglink: a link to $tmp/gone, which does not exist$" "$tmp/dang.log") != 1 )) \
    "status $rc: $(tail -1 "$tmp/underfile.log"); status $rc2: $(tail -1 "$tmp/dang.log"); status $rc3: $(tail -1 "$tmp/underfifo.log"); status $rc4: $(tail -1 "$tmp/dangsub.log")"
# A file system out of inodes (a full disk of another kind), in a private mount namespace: the run's
# folder and its parent are made, its lock file cannot be: one line, and both folders taken back.
mkdir -p "$tmp/noinode"
unshare -rm sh -c 'mount -t tmpfs -o size=4m,nr_inodes=3 none "$0" || exit 99
    "$@" > /dev/null 2> "$0.err"; echo $? > "$0.rc"; find "$0" -mindepth 1 > "$0.left"' "$tmp/noinode" \
    "$FC" --threads 1 train --config "$TINY" --run "$tmp/noinode/a/r" --steps 2 2> /dev/null
if [ ! -f "$tmp/noinode.rc" ]; then echo "SKIP train_lock_unmade_leaves_no_folder: cannot mount a tmpfs in a private namespace (unshare -rm)"
else
    expect train_lock_unmade_leaves_no_folder $(( $(cat "$tmp/noinode.rc") != 1 || $(wc -l < "$tmp/noinode.err") != 1 ||
            $(grep -c "a/r/.lock: cannot open the run's lock file: No space left on device" "$tmp/noinode.err") != 1 ||
            $(wc -l < "$tmp/noinode.left") != 0 )) \
        "status $(cat "$tmp/noinode.rc"): $(cat "$tmp/noinode.err"); left: $(tr '\n' ' ' < "$tmp/noinode.left")"
fi

# ---- permissions: the umask decides (a group's 002 leaves the run group-writable, its lock too), and
# a resume's rewrite of metrics.jsonl keeps a chmod 600 ----
(umask 002; "$FC" --threads 1 train --config "$TINY" --run "$tmp/umask/run" --steps 2 > /dev/null 2>&1)
modes=$(cd "$tmp/umask" && stat -c '%a' run run/.lock run/metrics.jsonl run/ckpt-00000002.safetensors | tr '\n' ' ')
chmod 600 "$tmp/umask/run/metrics.jsonl"
(umask 022; "$FC" --threads 1 train --config "$TINY" --run "$tmp/umask/run" --extend --steps 3 > /dev/null 2>&1)
rc=$?
kept=$(stat -c '%a' "$tmp/umask/run/metrics.jsonl")
expect train_modes_follow_umask $([ "$modes" = "775 664 664 664 " ] && [ $rc = 0 ] && [ "$kept" = 600 ]; echo $?) \
    "under umask 002: folder, .lock, metrics.jsonl, checkpoint $modes(want 775 664 664 664); metrics.jsonl after a resume: $kept (chmod 600 before it), status $rc"
# a umask that leaves its owner no access (777): the lock cannot be made, and the folder train made is
# taken back (it was left, mode 000, and every later train refused it: "cannot list its checkpoints").
# As nobody when the suite runs as root, which reads any folder.
mkdir -m 777 "$tmp/umask7" && chmod 711 "$tmp"
(umask 777; exec ${as_user[@]+"${as_user[@]}"} "$FC" --threads 1 train --config "$TINY" --run "$tmp/umask7/run" \
    --steps 2) > "$tmp/umask7.out" 2> "$tmp/umask7.err"
rc=$?
if [ $rc = 126 ] || [ $rc = 127 ]; then
    echo "SKIP train_umask_777_leaves_no_folder: cannot run as another user than root: $(tail -1 "$tmp/umask7.err")"
else
    expect train_umask_777_leaves_no_folder $(( rc != 1 || $(wc -l < "$tmp/umask7.err") != 1 ||
        $(grep -c "umask7/run/.lock: cannot open the run's lock file: Permission denied" "$tmp/umask7.err") != 1 ||
        $(ls -A "$tmp/umask7" | wc -l) != 0 )) "status $rc: $(head -c 200 "$tmp/umask7.err"); left: $(ls -A "$tmp/umask7" | tr '\n' ' ')"
fi
