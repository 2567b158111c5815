#!/usr/bin/env bash
# The process a command runs in, as users' shells, schedulers and wrappers leave it: stdout closed or
# on a full disk, the terminal closed (SIGHUP) or ignored (nohup), a file size limit, OpenMP's
# thread limit, prepare stopped part-way.
# usage: tests/cli/test_process.sh FRAMECHAIN
set -u
. "$(dirname "$0")/../lib.sh"
TINY=configs/tiny/starter.conf
train() { "$FC" --threads 2 train --config "$TINY" --set warmup_steps=1 "$@"; }

# stdout closed (a daemon, a cron job): the first file opened would take descriptor 1 and the log
# would land in it; here the run folder's lock file, which must stay empty
train --run "$tmp/closed" --steps 2 >&-
rc=$?
lock=$(wc -c < "$tmp/closed/.lock" 2> /dev/null || echo missing)
expect stdout_closed_log_lands_nowhere $(( rc != 0 || lock != 0 )) "status $rc, .lock holds $lock bytes"

# what stdout was given did not all arrive (a full disk under a redirection): said, status 1
"$FC" inspect --config "$TINY" --params > /dev/full 2> "$tmp/full.err"
rc=$?
expect stdout_write_error_said $(( rc != 1 || $(grep -c "^framechain: write error on standard output" "$tmp/full.err") != 1 )) \
    "status $rc: $(head -1 "$tmp/full.err")"

# SIGHUP (the terminal or ssh session closed) stops a train as SIGTERM does: a checkpoint of the step
# under way, status 129
"$FC" --threads 2 train --config "$TINY" --set warmup_steps=1 --run "$tmp/hup" --steps 100000 --set checkpoint_every=100000 \
    > "$tmp/hup.log" 2>&1 &
pid=$!
wait_until 120 $pid trained_past "$tmp/hup" "$tmp/hup.log" 2
kill -HUP $pid
wait $pid
rc=$?
expect sighup_checkpoints_and_stops $(( rc != 129 || $(grep -c "^stopped by SIGHUP at step [0-9]*; the checkpoint is written" "$tmp/hup.log") != 1 ||
    $(ls "$tmp/hup" | grep -c '^ckpt-') != 1 )) "status $rc, $(tail -1 "$tmp/hup.log" | cut -c1-80) $waited"

# started with SIGHUP ignored (nohup): it stays ignored; SIGTERM still stops the run
(trap '' HUP; exec "$FC" --threads 2 train --config "$TINY" --set warmup_steps=1 --run "$tmp/nohup" --steps 100000 \
    --set checkpoint_every=100000 > "$tmp/nohup.log" 2>&1) &
pid=$!
wait_until 120 $pid trained_past "$tmp/nohup" "$tmp/nohup.log" 2
kill -HUP $pid
sleep 0.5
alive=$(kill -0 $pid 2> /dev/null && echo 1 || echo 0)
kill -TERM $pid
wait $pid
rc=$?
expect nohup_keeps_sighup_ignored $(( alive != 1 || rc != 143 || $(grep -c "^stopped by SIGTERM" "$tmp/nohup.log") != 1 )) \
    "alive after SIGHUP: $alive; status $rc after SIGTERM: $(tail -1 "$tmp/nohup.log" | cut -c1-60) $waited"

# a file size limit met while a checkpoint is written: the write fails with a line (not SIGXFSZ), the
# temporary goes, the checkpoint before stays
train --run "$tmp/fsize" --steps 2 > /dev/null 2>&1
(ulimit -f 200; exec "$FC" --threads 2 train --config "$TINY" --set warmup_steps=1 --run "$tmp/fsize" --extend --steps 4) \
    > "$tmp/fsize.log" 2>&1
rc=$?
expect file_size_limit_is_a_write_error $(( rc != 1 || $(grep -c "File too large" "$tmp/fsize.log") < 1 ||
    $(ls -a "$tmp/fsize" | grep -c 'tmp-') != 0 || $(ls "$tmp/fsize" | grep -c '^ckpt-00000002') != 1 )) \
    "status $rc: $(grep -m1 -o 'checkpoint at step.*' "$tmp/fsize.log" | cut -c1-120); $(ls -a "$tmp/fsize" | grep -c 'tmp-') temporaries left"

# OpenMP's thread limit below --threads (a batch system's OMP_THREAD_LIMIT=1): the teams take the
# limit; a GEMM split for two threads in a team of one had waited for good
OMP_THREAD_LIMIT=1 timeout -k 5 120 "$FC" --threads 2 train --config "$TINY" --set warmup_steps=1 --run "$tmp/limit" \
    --steps 2 > "$tmp/limit.log" 2>&1
rc=$?
expect omp_thread_limit_trains $(( rc != 0 || $(grep -c '"step":2' "$tmp/limit/metrics.jsonl" 2> /dev/null) != 1 )) \
    "status $rc (124: it hung): $(tail -1 "$tmp/limit.log" | cut -c1-80)"
# OMP_MAX_ACTIVE_LEVELS=0 makes every team inactive, the same wait for good (SIGTERM did not end it)
(OMP_MAX_ACTIVE_LEVELS=0 timeout -k 5 120 "$FC" --threads 2 train --config "$TINY" --set warmup_steps=1 \
    --run "$tmp/levels" --steps 2) > "$tmp/levels.log" 2>&1
rc=$?
expect omp_max_active_levels_trains $(( rc != 0 || $(grep -c '"step":2' "$tmp/levels/metrics.jsonl" 2> /dev/null) != 1 )) \
    "status $rc (124 or 137: it hung): $(tail -1 "$tmp/levels.log" | cut -c1-80)"
# OMP_NUM_THREADS over the 1024 threads --threads takes: one line, status 1, no run folder (99999 threads
# crashed with SIGSEGV at the first parallel region, the folder left holding its lock); --threads decides
(OMP_NUM_THREADS=99999 timeout -k 5 120 "$FC" train --config "$TINY" --run "$tmp/omp_many" --steps 2) > "$tmp/omp_many.out" \
    2> "$tmp/omp_many.err"
rc=$?
OMP_NUM_THREADS=99999 timeout -k 5 120 "$FC" --threads 1 train --config "$TINY" --set warmup_steps=1 \
    --run "$tmp/omp_given" --steps 2 > "$tmp/omp_given.log" 2>&1
rc2=$?
expect omp_num_threads_bounded $(( rc != 1 || rc2 != 0 || $(wc -l < "$tmp/omp_many.err") != 1 ||
    $(grep -c "^framechain: OMP_NUM_THREADS asks for more than the 1024 threads a command may run: give a smaller value, or --threads N$" "$tmp/omp_many.err") != 1 ||
    $(ls "$tmp" | grep -c omp_many$) != 0 )) \
    "status $rc: $(head -c 200 "$tmp/omp_many.err"); with --threads 1: status $rc2"

# an address-space limit (ulimit -v, as shared machines set it) too small for OpenBLAS's buffers of 128
# MiB a thread: OpenBLAS had retried for ever, before main(); now one line naming the limit and what it
# needs, status 1, at once. One that the start takes but not the run's plan: train refuses before its
# first step, leaving no run folder. The figure the first line asks for starts; the second's trains.
sanitized=0
(ulimit -v 4000000; "$FC" --version) 2>&1 | grep -q AddressSanitizer && sanitized=1
if [ $sanitized = 1 ]; then
    echo "SKIP address_space_limit_said: the sanitizers' shadow memory does not run under ulimit -v"
else
    (ulimit -v 300000; exec timeout -s KILL 20 "$FC" --threads 2 --version) > "$tmp/as.out" 2> "$tmp/as.err"
    rc=$?
    want=$(sed -n 's/.*raise the limit (ulimit -v \([0-9]*\), or unlimited).*/\1/p' "$tmp/as.err")
    expect address_space_limit_said $(( rc != 1 || $(wc -l < "$tmp/as.err") != 1 || $(grep -c "the address space is limited to 293 MiB (ulimit -v 300000); with 2 threads framechain needs at least" "$tmp/as.err") != 1 )) \
        "status $rc (137: it hung): $(cat "$tmp/as.err")"
    (ulimit -v "${want:-1}"; exec timeout -s KILL 20 "$FC" --threads 2 --version) > "$tmp/as.out" 2> "$tmp/as.err"
    expect address_space_limit_as_asked_starts $? "ulimit -v ${want:-?}: $(head -1 "$tmp/as.err")"
    two=$want
    # --threads after --device (whose value the check had taken for the command, counting every core)
    one=$( (ulimit -v 300000; "$FC" --threads 1 --version) 2>&1 | sed -n 's/.*raise the limit (ulimit -v \([0-9]*\), or unlimited).*/\1/p')
    (ulimit -v "${one:-1}"; exec timeout -s KILL 20 "$FC" --device cpu --threads 1 --version) > "$tmp/as.out" 2> "$tmp/as.err"
    expect address_space_limit_threads_after_device $? "ulimit -v ${one:-?}: $(head -1 "$tmp/as.err")"
    (ulimit -v "${want:-1}"; exec timeout -s KILL 60 "$FC" --threads 2 train --config "$TINY" --set batch_size=32 \
        --run "$tmp/as_run" --steps 2) > "$tmp/as.log" 2>&1
    rc=$?
    want=$(sed -n 's/.*raise it (ulimit -v \([0-9]*\) or more).*/\1/p' "$tmp/as.log")
    expect address_space_limit_plan_refused $(( rc != 1 || $(grep -c "as_run: the memory plan's .* need .* more address space, and the limit leaves" "$tmp/as.log") != 1 )) \
        "status $rc (137: it hung): $(grep -m1 framechain: "$tmp/as.log")"
    [ ! -e "$tmp/as_run" ]
    expect address_space_limit_plan_nothing_made $? "$(ls -A "$tmp/as_run" 2> /dev/null | tr '\n' ' ')"
    (ulimit -v "${want:-1}"; exec timeout -s KILL 120 "$FC" --threads 2 train --config "$TINY" --set batch_size=32 \
        --run "$tmp/as_run" --steps 2) > "$tmp/as.log" 2>&1
    rc=$?
    steps=$(grep -c '"step":2' "$tmp/as_run/metrics.jsonl" 2> /dev/null)
    expect address_space_limit_as_asked_trains $(( rc != 0 || ${steps:-0} != 1 )) \
        "ulimit -v ${want:-?}: status $rc: $(grep -m1 framechain: "$tmp/as.log")"
    # prepare under a limit that takes its start but not a shard of 256 MiB held until written: the line
    # names what to lower (--shard-mb) and the limit (it said batch_size, the frame size, no limit)
    (ulimit -v $(( ${one:-1} + 50000 )); exec timeout -s KILL 120 "$FC" --threads 1 prepare --input "$SAMPLES/vtest.avi" \
        --out "$tmp/as_prep" --size 64 --clip-frames 64 --overlap 63) > "$tmp/as_prep.log" 2>&1
    rc=$?
    expect address_space_limit_prepare_hint $(( rc != 1 || $(grep -c "^framechain: out of host memory: .*(hint: lower --shard-mb (a shard's clips are held in memory until it is written) or --size; the address space is limited to [0-9]* MiB (ulimit -v $(( ${one:-1} + 50000 ))): raise the limit)$" "$tmp/as_prep.log") != 1 )) \
        "status $rc: $(grep -m1 framechain: "$tmp/as_prep.log")"
    [ ! -e "$tmp/as_prep" ]
    expect address_space_limit_prepare_nothing_left $? "$(ls -A "$tmp/as_prep" 2> /dev/null | head -3 | tr '\n' ' ')"
    # libgomp's threads map the stack OMP_STACKSIZE asks for: at the limit that starts 2 threads of 8
    # MiB, stacks of 512 MiB are counted and named (the check counted 8 MiB a thread, and a run under
    # 1.1 GB stopped responding, deaf to SIGTERM, at a thread's first GEMM); the figure asked for starts,
    # and train's plan under it counts the stacks too: refused naming them, or it trains
    (ulimit -v "${two:-1}"; OMP_STACKSIZE=512m exec timeout -s KILL 20 "$FC" --threads 2 --version) > "$tmp/as.out" 2> "$tmp/as.err"
    rc=$?
    big=$(sed -n 's/.*raise the limit (ulimit -v \([0-9]*\), or unlimited).*/\1/p' "$tmp/as.err")
    expect address_space_limit_counts_thread_stacks $(( rc != 1 || $(wc -l < "$tmp/as.err") != 1 ||
        $(grep -c "and each thread's stack is 512 MiB (OMP_STACKSIZE: a smaller one helps too)" "$tmp/as.err") != 1 ||
        ${big:-0} < ${two:-1} + 500000 )) "ulimit -v ${two:-?}: status $rc: $(cat "$tmp/as.err")"
    (ulimit -v "${big:-1}"; OMP_STACKSIZE=512m exec timeout -s KILL 60 "$FC" --threads 2 train --config "$TINY" \
        --run "$tmp/as_stack" --steps 2) > "$tmp/as_stack.log" 2>&1
    rc=$?
    if [ $rc = 1 ]; then
        stack_said=$(grep -c "as_stack: the memory plan's .* and OpenBLAS's buffers for 2 threads and their stacks of 512 MiB (OMP_STACKSIZE) need" "$tmp/as_stack.log")
        want=$(sed -n 's/.*raise it (ulimit -v \([0-9]*\) or more).*/\1/p' "$tmp/as_stack.log")
        (ulimit -v "${want:-1}"; OMP_STACKSIZE=512m exec timeout -s KILL 120 "$FC" --threads 2 train --config "$TINY" \
            --run "$tmp/as_stack" --steps 2) > "$tmp/as_stack.log" 2>&1
        rc=$?
    else stack_said=1; fi
    steps=$(grep -c '"step":2' "$tmp/as_stack/metrics.jsonl" 2> /dev/null)
    expect address_space_limit_thread_stacks_train $(( rc != 0 || stack_said != 1 || ${steps:-0} != 1 )) \
        "status $rc (137: it hung): $(grep -m1 framechain: "$tmp/as_stack.log")"
fi
# a stack limit (ulimit -s) under what a command takes: one line, status 1, nothing made (train crashed
# with SIGSEGV and no word at 300 KiB); a command's --help too, which runs in the command's frame
(ulimit -s 256; exec "$FC" --threads 1 train --config "$TINY" --run "$tmp/stack_run" --steps 1) > "$tmp/stack.out" 2> "$tmp/stack.err"
rc=$?
(ulimit -s 256; exec "$FC" train --help) > "$tmp/stack_help.out" 2>&1
rc2=$?
expect stack_limit_said $(( rc != 1 || rc2 != 1 || $(wc -l < "$tmp/stack.err") != 1 ||
    $(grep -c "^framechain: the stack is limited to 256 KiB (ulimit -s 256); framechain needs at least 2048 KiB" "$tmp/stack.err") != 1 ||
    $(grep -c "^framechain: the stack is limited to 256 KiB" "$tmp/stack_help.out") != 1 )) \
    "status $rc: $(cat "$tmp/stack.err"); --help: status $rc2"
[ ! -e "$tmp/stack_run" ]
expect stack_limit_nothing_made $? "$(ls -A "$tmp/stack_run" 2> /dev/null | tr '\n' ' ')"

# a thread that cannot start (the processes a user may run, ulimit -u: a thread is one): one line naming
# the limit and the --threads that can run, status 1, nothing made (libgomp ended the process at the
# first parallel region: "Thread creation failed", no limit named). As nobody when the suite runs as
# root, whom the limit does not bind.
mkdir -m 777 "$tmp/nproc" && chmod 711 "$tmp"
(ulimit -u 1; exec ${as_user[@]+"${as_user[@]}"} "$FC" --threads 2 train --config "$TINY" --run "$tmp/nproc/run" \
    --steps 1) > "$tmp/nproc.out" 2> "$tmp/nproc.err"
rc=$?
if [ $rc = 126 ] || [ $rc = 127 ]; then
    echo "SKIP thread_limit_said: cannot run as another user than root: $(tail -1 "$tmp/nproc.err")"
else
    # (the sanitizers' leak check at exit needs a thread of its own, and says so under the limit)
    expect thread_limit_said $(( rc != 1 || ( sanitized == 0 && $(wc -l < "$tmp/nproc.err") != 1 ) ||
        $(grep -c "^framechain: could not start thread 2 of 2 (Resource temporarily unavailable): each is a process under the limit of processes a user may run (ulimit -u 1), and maps a stack of [0-9]* MiB (.*): run fewer threads (--threads 1), or raise the limit$" "$tmp/nproc.err") != 1 ||
        $(ls -A "$tmp/nproc" | wc -l) != 0 )) "status $rc: $(head -c 300 "$tmp/nproc.err"); left: $(ls -A "$tmp/nproc" | tr '\n' ' ')"
fi

# prepare stopped part-way: what it wrote goes (the folder it made too), status 128 + the signal
"$FC" prepare --input shapes:1:1000000 --out "$tmp/cut" --size 16 --clip-frames 8 --shard-mb 1 > "$tmp/cut.log" 2>&1 &
pid=$!
wait_until 120 $pid have "$tmp/cut/shard-0000[1-9]*"
kill -INT $pid
wait $pid
rc=$?
expect prepare_sigint_removes_what_it_wrote $(( rc != 130 || $(grep -c "^prepare: stopped by SIGINT: the shards written so far removed" "$tmp/cut.log") != 1 ||
    $(ls -a "$tmp" | grep -c '^cut$') != 0 )) "status $rc: $(tail -1 "$tmp/cut.log" | cut -c1-100); left: $(ls -A "$tmp/cut" 2> /dev/null | tr '\n' ' ') $waited"

# the same with stdout a pipe whose reader is gone (Ctrl-C takes `| tee` down with it): the stop line
# cannot be written, and the clean-up and the status are still the stop's, not a death by SIGPIPE
mkfifo "$tmp/pipe"
many=()  # more frames than the wait below can see through
for k in 1 2 3 4 5 6 7 8 9 10; do many+=(--input shapes:$k:1000000); done
"$FC" prepare "${many[@]}" --out "$tmp/cut2" --size 16 --clip-frames 8 --shard-mb 1 > "$tmp/pipe" 2> "$tmp/cut2.err" &
pid=$!
head -c 1 "$tmp/pipe" > /dev/null  # the reader takes a byte and goes
wait_until 120 $pid have "$tmp/cut2/shard-0000[1-9]*"
kill -INT $pid
wait $pid
rc=$?
expect prepare_sigint_reader_gone $(( rc != 130 || $(ls -a "$tmp" | grep -c '^cut2$') != 0 )) \
    "status $rc (130 wanted, 141 a death by SIGPIPE); left: $(ls -A "$tmp/cut2" 2> /dev/null | tr '\n' ' ') $waited"

# a command whose product is on disk, its stdout on a full disk or a pipe closed early: the product
# whole, a warning, status 0 (a retry would refuse the dataset as there); help, whose product is its
# text, fails as inspect does
"$FC" prepare --input shapes:2:20 --out "$tmp/full_ds" --size 16 --clip-frames 8 > /dev/full 2> "$tmp/full_ds.err"
rc1=$?
# (a pipe whose reader has already gone, SIGPIPE at its default: `| head -c 1` would race the writes)
"${PYTHON:-python3}" -c 'import os, signal, sys
r, w = os.pipe(); os.close(r); os.dup2(w, 1); signal.signal(signal.SIGPIPE, signal.SIG_DFL)
os.execv(sys.argv[1], sys.argv[1:])' "$FC" prepare --input shapes:2:20 --out "$tmp/head_ds" --size 16 --clip-frames 8 \
    2> "$tmp/head_ds.err"
rc2=$?
"$FC" inspect "$tmp/full_ds" > /dev/null 2>&1 && "$FC" inspect "$tmp/head_ds" > /dev/null 2>&1
whole=$?
"$FC" --help > /dev/full 2> "$tmp/help_full.err"
rc3=$?
expect stdout_lost_beside_product_warns $(( rc1 != 0 || rc2 != 0 || whole != 0 || rc3 != 1 ||
    $(grep -c "^framechain: warning: standard output could not all be written (No space left on device): part of the report on it is lost; what the command wrote to disk is whole$" "$tmp/full_ds.err") != 1 ||
    $(grep -c "^framechain: warning: standard output could not all be written (Broken pipe)" "$tmp/head_ds.err") != 1 ||
    $(grep -c "^framechain: write error on standard output" "$tmp/help_full.err") != 1 )) \
    "prepare > /dev/full: status $rc1, $(head -1 "$tmp/full_ds.err" | cut -c1-90); a pipe without a reader: status $rc2; datasets whole: $((whole == 0)); --help > /dev/full: status $rc3"
# On a terminal 40 columns wide (a pseudo-terminal, tests/cli/pty_run.py): train's progress line,
# rewritten in place, is cut to 39 columns (a wrapped line leaves a row behind at every rewrite), and
# a line printed mid-run (a preview skipped, one put off at a checkpoint's step) starts a line of its
# own, neither glued to the progress line nor after a blank one
mkdir -p "$tmp/tty/samples/step-00000002.png"  # a preview that cannot be written
"${PYTHON:-python3}" tests/cli/pty_run.py 40 "$tmp/tty.bin" "$FC" --threads 1 train --config "$TINY" --run "$tmp/tty" --steps 6 \
    --set sample_every=2 --set warmup_steps=1 --set checkpoint_every=4 > /dev/null 2>&1
rc=$?
why=$("${PYTHON:-python3}" - "$tmp/tty.bin" <<'PY'
import re, sys
b = open(sys.argv[1], "rb").read()
segs = re.split(rb"[\r\n]+", b)
prog = [s for s in segs if re.match(rb"step \d+/", s)]
long = [s for s in prog if len(s) > 39]
glued = [s for s in prog if b"preview" in s or b"framechain" in s]
starts = all(re.search(rb"(^|\n)" + re.escape(w), b) for w in (b"preview of step 2 skipped", b"preview of step 4 put off"))
blank = re.search(rb"\n\r?\n", b) is not None
ok = prog and not long and not glued and starts and not blank
print(("ok: " if ok else "") + f"{len(prog)} progress lines, {len(long)} over 39 columns, {len(glued)} with a message "
      f"glued on, the messages at a line's start: {starts}, a blank line: {blank}")
PY
)
[ $rc = 0 ] && [ "${why:0:4}" = "ok: " ]
expect tty_progress_fits_and_messages_start_lines $? "status $rc: $why"

exit 0
