#!/usr/bin/env bash
# One run on several ranks (mpirun, src/dist/dist.h) against the same run on one: the same windows,
# so the same losses and gradients up to the order of the sums; the optimizer state and EMA split over
# the ranks (ZeRO-1, shard_optimizer = 1, the default) against every rank keeping all of it: the same
# bytes; the sums started block by block during the backward against one sum after it: the same bytes; checkpoints of one layout that resume on any number of ranks; kill -9 of any one rank, again
# and again, costing nothing but the steps since the last checkpoint. A build without MPI refuses to
# be one of several ranks.
# usage: test_dist.sh FRAMECHAIN [FRAMECHAIN_EMU]: with the second, the program built on the CUDA
# emulation (tests/cuda/emu), the GPU ranks' path runs too: device memory through the host and MPI.
set -u
. "$(dirname "$0")/../lib.sh"
EMU=${2:-}
PYTHON=${PYTHON:-$(for p in /usr/bin/python3 python3; do $p -c 'import numpy' 2> /dev/null && echo $p && break; done)}
PYTHON=${PYTHON:-python3}
TINY=configs/tiny/starter.conf
CHECK=tests/train/dist_check.py

if ! "$FC" --version | grep -q '^  MPI'; then
    OMPI_COMM_WORLD_SIZE=2 "$FC" train --config "$TINY" --run "$tmp/lone" > "$tmp/lone.log" 2>&1
    rc=$?
    expect no_mpi_refuses_ranks $(( rc == 0 || $(grep -c 'built without MPI' "$tmp/lone.log") != 1 )) \
        "status $rc: $(tail -1 "$tmp/lone.log")"
    expect no_mpi_writes_nothing $([ ! -e "$tmp/lone" ]; echo $?) "no run folder made"
    # every other command runs as one process, with or without MPI
    OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=0 "$FC" prepare --input "$SAMPLES/vtest.avi" --out "$tmp/prep_ranks" \
        --size 32 --clip-frames 50 > "$tmp/prep_ranks.log" 2>&1
    rc=$?
    expect no_mpi_other_commands_refuse_ranks $(( rc == 0 || $(grep -c '^framechain: prepare runs as one process' "$tmp/prep_ranks.log") != 1 )) \
        "status $rc: $(tail -1 "$tmp/prep_ranks.log" | cut -c1-140)"
    echo "SKIP distributed: this framechain was built without MPI (apt-get install libopenmpi-dev openmpi-bin; make)"
    exit 0
fi
if ! command -v mpirun > /dev/null; then
    fail mpirun_found "framechain was built with MPI but there is no mpirun (apt-get install openmpi-bin)"
    exit 0
fi
# Open MPI refuses root unless told (CI runs as root), may lack the kernel's cross-memory attach in a
# container, and counts cores: two ranks may share one.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
SETS=(--set steps=20 --set checkpoint_every=5 --set keep_checkpoints=10 --set warmup_steps=5 --set lr=1e-3)
train_on() {  # train_on RANKS RUN [extra args...]; 0 ranks: framechain alone, without mpirun
    local n=$1 run=$2
    shift 2
    if [ "$n" -eq 0 ]; then
        "$FC" --threads 1 train --config "$TINY" --run "$run" "${SETS[@]}" "$@"
    else
        mpirun -np "$n" "$FC" --threads 1 train --config "$TINY" --run "$run" "${SETS[@]}" "$@"
    fi
}
check() {  # check NAME RUN_A RUN_B [dist_check options]
    local name=$1
    shift
    "$PYTHON" "$CHECK" "$@" > "$tmp/check.log" 2>&1
    local rc=$?
    expect "$name" $rc "$(tr '\n' ' ' < "$tmp/check.log")"
}
final() { echo "$1/ckpt-$(printf %08d "${2:-20}").safetensors"; }
# keep_to RUN STEP COPY: COPY holds RUN as it was at STEP (its later checkpoints never written)
keep_to() {
    cp -r "$1" "$3"
    for f in "$3"/ckpt-*.safetensors; do
        local s=${f##*/ckpt-}
        [ $((10#${s%.safetensors})) -gt "$2" ] && rm "$f"
    done
}

# ---- one rank against two: the same global batch ----
export FRAMECHAIN_TEST_GRADS_AT_STEP=1
train_on 0 "$tmp/one" > "$tmp/one.log" 2>&1
rc1=$?
train_on 2 "$tmp/two" > "$tmp/two.log" 2>&1
rc2=$?
unset FRAMECHAIN_TEST_GRADS_AT_STEP
expect two_ranks_train $(( rc1 != 0 || rc2 != 0 || $(grep -c '^ranks: 2, 1 windows of the batch of 2' "$tmp/two.log") != 1 )) \
    "status $rc1 on one rank, $rc2 on two; $(grep -m1 '^ranks:' "$tmp/two.log"); $(grep '^communication' "$tmp/two.log")"
check two_ranks_same_losses_gradients_weights "$tmp/one" "$tmp/two" --grads 1 --params-step 20 --layout
plan_kib() { sed -n "s/^  $2 *\([0-9.]*\) KiB$/\1/p" "$1" | head -1; }
# OpenMPI: the note on SIGTERM's grace, once, unless odls_base_sigkill_timeout is given (the SIGTERM
# run below gives it)
if mpirun --version 2> /dev/null | grep -q 'Open MPI'; then
    notes=$(grep -c '^signals: mpirun sends SIGKILL 1 s after a SIGTERM' "$tmp/two.log")
    expect sigkill_grace_note $(( notes != 1 )) "$notes line(s) in a 2-rank run's output: $(grep -m1 '^signals:' "$tmp/two.log")"
fi
opt1=$(plan_kib "$tmp/one.log" optimizer) opt2=$(plan_kib "$tmp/two.log" optimizer)
ema1=$(plan_kib "$tmp/one.log" EMA) ema2=$(plan_kib "$tmp/two.log" EMA)
expect zero1_plan_per_rank $(awk -v a="$opt1" -v b="$opt2" -v c="$ema1" -v d="$ema2" \
    'BEGIN { print !(a > 0 && c > 0 && b > 0.45 * a && b < 0.55 * a && d > 0.45 * c && d < 0.55 * c) }') \
    "memory plan of a rank: optimizer $opt2 KiB (one rank: $opt1), EMA $ema2 KiB (one rank: $ema1); $(grep -m1 '^per rank' "$tmp/two.log")"

# ---- the ranks on one machine share its memory: their plans are summed against it ----
# A machine of 1.4 times one rank's plan holds one rank, not two (each two-rank plan is most of the
# one-rank plan: the program itself is the larger part at this size)
total1=$(sed -n 's/^  total *\([0-9.]*\) MiB$/\1/p' "$tmp/one.log" | head -1)
mib=$(awk -v t="${total1:-0}" 'BEGIN {printf "%d", 1.4 * t}')
FRAMECHAIN_TEST_MEM_TOTAL_MIB=$mib train_on 1 "$tmp/mem1" --set steps=6 > "$tmp/mem1.log" 2>&1
rc1=$?
FRAMECHAIN_TEST_MEM_TOTAL_MIB=$mib train_on 2 "$tmp/mem2" --set steps=6 > "$tmp/mem2.log" 2>&1
rc2=$?
said=$(grep -c "^framechain: $tmp/mem2: the memory plan's [0-9.]* GiB of host memory (its 2 ranks together) exceed this machine's [0-9.]* GiB: .*, or run fewer ranks on it$" "$tmp/mem2.log")
expect ranks_share_machine_memory $(( rc1 != 0 || rc2 == 0 || said != 1 || $(grep -c '^framechain:' "$tmp/mem2.log") != 1 )) \
    "a machine of $mib MiB (one rank's plan: ${total1:-?} MiB): one rank status $rc1; two: status $rc2, $(grep -m1 '^framechain:' "$tmp/mem2.log" | cut -c1-200) ($said such line; $(grep -c '^framechain:' "$tmp/mem2.log") in all); $(grep -m1 '^host memory of the' "$tmp/mem1.log" "$tmp/mem2.log" | sed 's/.*log://')"
[ ! -e "$tmp/mem2" ]
expect ranks_share_machine_memory_nothing_made $? "the refused run's folder: $([ -e "$tmp/mem2" ] && echo left || echo not made)"

# ---- a mistake in the command line or the config is said once, by the machine's first rank ----
printf 'role = starter\nwidth = 64\nbogus_key = 3\n' > "$tmp/bad.conf"
mpirun -np 3 "$FC" --threads 1 train --config "$tmp/bad.conf" --run "$tmp/badconf" > "$tmp/badconf.log" 2>&1
rc_conf=$?
mpirun -np 3 "$FC" --threads 1 train --config "$TINY" --run "$tmp/badconf" --steps -3 > "$tmp/badarg.log" 2>&1
rc_arg=$?
expect config_error_said_once $(( rc_conf == 0 || rc_arg == 0 || $(grep -c '^framechain' "$tmp/badconf.log") != 1 ||
    $(grep -c "^framechain: $tmp/bad.conf:3: unknown key 'bogus_key'" "$tmp/badconf.log") != 1 ||
    $(grep -c '^framechain' "$tmp/badarg.log") != 1 || $(grep -c '^framechain train: --steps -3' "$tmp/badarg.log") != 1 )) \
    "3 ranks: status $rc_conf and $rc_arg; $(grep -c '^framechain' "$tmp/badconf.log") and $(grep -c '^framechain' "$tmp/badarg.log") lines from framechain: $(grep -m1 '^framechain' "$tmp/badconf.log"); $(grep -m1 '^framechain' "$tmp/badarg.log" | cut -c1-80)"
# a rank started with another command line (mpirun's MPMD form) whose own is wrong says so, named; it
# was silent (rank 0's command line was fine, the job ended with mpirun's block alone)
mpirun -np 1 "$FC" --threads 1 train --config "$TINY" --run "$tmp/badconf" --steps 2 : \
    -np 1 "$FC" --threads 1 train --config "$TINY" --run "$tmp/badconf" --steps 2 --set bogus_key=3 > "$tmp/mpmd.log" 2>&1
rc=$?
expect other_command_line_error_said $(( rc == 0 || $(grep -c '^framechain' "$tmp/mpmd.log") != 1 ||
    $(grep -c "^framechain train: rank 1: --set bogus_key=3: unknown key 'bogus_key'" "$tmp/mpmd.log") != 1 )) \
    "status $rc; $(grep -c '^framechain' "$tmp/mpmd.log") lines from framechain: $(grep -m1 '^framechain' "$tmp/mpmd.log")"
[ ! -e "$tmp/badconf" ]
expect config_error_nothing_made $? "the run folder: $([ -e "$tmp/badconf" ] && echo left || echo not made)"

# ---- what every rank of a machine finds alike past the config is said once too: a data folder it
# lacks or that does not fit the config, a run --extend cannot extend ----
mpirun -np 2 "$FC" --threads 1 train --config "$TINY" --run "$tmp/nodata_run" --data "$tmp/no_such_data" \
    > "$tmp/nodata.log" 2>&1
rc_data=$?
mpirun -np 2 "$FC" --threads 1 train --config "$TINY" --run "$tmp/noext_run" --extend --steps 30 > "$tmp/noext.log" 2>&1
rc_ext=$?
expect start_errors_said_once $(( rc_data == 0 || rc_ext == 0 || $(grep -c '^framechain' "$tmp/nodata.log") != 1 ||
    $(grep -c "^framechain: $tmp/no_such_data: no such folder" "$tmp/nodata.log") != 1 ||
    $(grep -c '^framechain' "$tmp/noext.log") != 1 ||
    $(grep -c "^framechain: $tmp/noext_run: --extend: the run holds no whole checkpoint" "$tmp/noext.log") != 1 )) \
    "2 ranks: status $rc_data and $rc_ext; $(grep -c '^framechain' "$tmp/nodata.log") and $(grep -c '^framechain' "$tmp/noext.log") lines from framechain: $(grep -m1 '^framechain' "$tmp/nodata.log"); $(grep -m1 '^framechain' "$tmp/noext.log" | cut -c1-100)"
[ ! -e "$tmp/nodata_run" ] && [ ! -e "$tmp/noext_run" ]
expect start_errors_nothing_made $? "the run folders: $(ls -d "$tmp"/nodata_run "$tmp"/noext_run 2> /dev/null | tr '\n' ' ')"

# --extend where the ranks do not see one run folder (each its own working folder, the run's path
# relative): the rank that finds no checkpoint says so and why ranks can differ (its line was --extend's
# plain refusal, where rank 0 had found the run)
mkdir -p "$tmp/wdA" "$tmp/wdB"
(cd "$tmp/wdA" && "$FC" --threads 1 train --config "$OLDPWD/$TINY" --run r --steps 4 --set checkpoint_every=2 > /dev/null 2>&1)
mpirun -np 1 -wdir "$tmp/wdA" "$FC" --threads 1 train --config "$PWD/$TINY" --run r --steps 8 --extend : \
    -np 1 -wdir "$tmp/wdB" "$FC" --threads 1 train --config "$PWD/$TINY" --run r --steps 8 --extend > "$tmp/wd.log" 2>&1
rc=$?
expect extend_unshared_run_folder_said $(( rc == 0 || $(grep -c '^framechain' "$tmp/wd.log") != 1 ||
    $(grep -c '^framechain: rank 1: r: --extend: .*(other ranks found the run otherwise: every rank reads the run folder, which must be on a filesystem all of them see)$' "$tmp/wd.log") != 1 )) \
    "status $rc: $(grep -m1 '^framechain' "$tmp/wd.log" | cut -c1-240)"
# each rank its own copy of the run folder, rank 1's checkpoint of step 4 another file (that run trained
# to 2, then extended to 4): rank 1 loaded it by the path rank 0 sent and trained the two models' states
# mixed, status 0. Refused by rank 1 before a step, naming the file; nothing written.
mkdir -p "$tmp/wdE" "$tmp/wdF"
(cd "$tmp/wdE" && "$FC" --threads 1 train --config "$OLDPWD/$TINY" --run r --steps 4 --set checkpoint_every=2 > /dev/null 2>&1)
(cd "$tmp/wdF" && "$FC" --threads 1 train --config "$OLDPWD/$TINY" --run r --steps 2 --set checkpoint_every=2 > /dev/null 2>&1 &&
    "$FC" --threads 1 train --config "$OLDPWD/$TINY" --run r --steps 4 --extend --set checkpoint_every=2 > /dev/null 2>&1)
mpirun -np 1 -wdir "$tmp/wdE" "$FC" --threads 1 train --config "$PWD/$TINY" --run r --steps 8 --extend : \
    -np 1 -wdir "$tmp/wdF" "$FC" --threads 1 train --config "$PWD/$TINY" --run r --steps 8 --extend > "$tmp/wdEF.log" 2>&1
rc=$?
[ -f "$tmp/wdF/r/ckpt-00000004.safetensors" ]
expect ranks_read_other_checkpoint_refused $(( $? != 0 || rc == 0 ||
    $(grep -c '^framechain: rank 1: r/ckpt-00000004.safetensors: not the file rank 0 starts from (its header.s crc32 [0-9a-f]*, rank 0.s [0-9a-f]*)' "$tmp/wdEF.log") != 1 ||
    $(ls "$tmp/wdE/r" "$tmp/wdF/r" | grep -c 'ckpt-0000000[5-8]') != 0 )) \
    "status $rc: $(grep -m1 '^framechain' "$tmp/wdEF.log" | cut -c1-240)"

# ---- every other command runs as one process: started as several (N copies racing on the same
# files) it is refused, once, before anything is written ----
mpirun -np 2 "$FC" prepare --input "$SAMPLES/vtest.avi" --out "$tmp/prep_ranks" --size 32 --clip-frames 50 \
    > "$tmp/prep_ranks.log" 2>&1
rc=$?
expect other_commands_refuse_ranks $(( rc == 0 || $(grep -c '^framechain' "$tmp/prep_ranks.log") != 1 ||
    $(grep -c '^framechain: prepare runs as one process, and this is one of 2 that a launcher started' "$tmp/prep_ranks.log") != 1 )) \
    "status $rc; $(grep -c '^framechain' "$tmp/prep_ranks.log") lines from framechain: $(grep -m1 '^framechain' "$tmp/prep_ranks.log" | cut -c1-140)"
expect other_commands_refuse_ranks_nothing_made $([ ! -e "$tmp/prep_ranks" ]; echo $?) \
    "the output folder: $([ -e "$tmp/prep_ranks" ] && echo left || echo not made)"

# ---- ranks started with different configs or data (mpirun's MPMD form: -np 1 A : -np 1 B) are
# refused before anything is written, by the rank that differs, naming the line ----
mpirun -np 1 "$FC" --threads 1 train --config "$TINY" --run "$tmp/mpmd" "${SETS[@]}" : \
    -np 1 "$FC" --threads 1 train --config "$TINY" --run "$tmp/mpmd" "${SETS[@]}" --set seed=7 > "$tmp/mpmd.log" 2>&1
rc_seed=$?
mpirun -np 1 "$FC" --threads 1 train --config "$TINY" --run "$tmp/mpmd" "${SETS[@]}" : \
    -np 1 "$FC" --threads 1 train --config "$TINY" --run "$tmp/mpmd_other" "${SETS[@]}" > "$tmp/mpmd_run.log" 2>&1
rc_run=$?
expect ranks_differ_refused $(( rc_seed == 0 || rc_run == 0 ||
    $(grep -c "^framechain: rank 1: 'seed = 7' where rank 0 has 'seed = 1" "$tmp/mpmd.log") != 1 ||
    $(grep -c "^framechain: rank 1: '--run = $tmp/mpmd_other' where rank 0 has '--run = $tmp/mpmd'" "$tmp/mpmd_run.log") != 1 )) \
    "status $rc_seed and $rc_run: $(grep -m1 '^framechain' "$tmp/mpmd.log"); $(grep -m1 '^framechain' "$tmp/mpmd_run.log" | cut -c1-160)"
[ ! -e "$tmp/mpmd" ] && [ ! -e "$tmp/mpmd_other" ]
expect ranks_differ_nothing_made $? "the run folders: $(ls -d "$tmp"/mpmd* 2> /dev/null | tr '\n' ' ')"

# --vae decodes rank 0's previews: only rank 0 loads it, so a file that cannot be read is said once
mpirun -np 2 "$FC" --threads 1 train --config "$TINY" --run "$tmp/vae_missing" "${SETS[@]}" --set sample_every=5 \
    --vae "$tmp/no_such_vae.safetensors" > "$tmp/vae_missing.log" 2>&1
rc=$?
expect vae_error_said_once $(( rc == 0 || $(grep -c "^framechain: .*no_such_vae.safetensors" "$tmp/vae_missing.log") != 1 )) \
    "status $rc, $(grep -c "^framechain: .*no_such_vae" "$tmp/vae_missing.log") lines: $(grep -m1 '^framechain' "$tmp/vae_missing.log")"
# Each machine may hold its copy of the autoencoder at a path of its own: the ranks compare the files'
# contents (their SHA-256), not their paths. A copy trains; another file, or one a rank cannot read, is
# refused by that rank in one line naming both files, before anything is written.
if "$PYTHON" tools/autoencoder_reference.py --make "$tmp/ae" > "$tmp/ae.log" 2>&1; then
    ffmpeg -v error -y -i "$SAMPLES/vtest.avi" -frames:v 50 -c:v ffv1 "$tmp/short.mkv"
    "$FC" --threads 1 prepare --vae "$tmp/ae/taesd.safetensors" --input "$tmp/short.mkv" --out "$tmp/lat" --size 64 \
        --clip-frames 25 > "$tmp/lat.log" 2>&1 || fail vae_latents_for_ranks "$(tail -1 "$tmp/lat.log")"
    cp "$tmp/ae/taesd.safetensors" "$tmp/taesd_copy.safetensors"
    LAT=(--config configs/tiny/extrapolate.conf --set frame_size=8 --set channels=4 --set patch=2 --set sample_every=5
         --set preview_budget=1 --steps 5 --data "$tmp/lat")
    vae_ranks() {  # vae_ranks RUN VAE_OF_RANK_0 VAE_OF_RANK_1
        mpirun -np 1 "$FC" --threads 1 train "${LAT[@]}" --run "$1" --vae "$2" : \
            -np 1 "$FC" --threads 1 train "${LAT[@]}" --run "$1" --vae "$3" > "$1.log" 2>&1
    }
    vae_ranks "$tmp/vcopy" "$tmp/ae/taesd.safetensors" "$tmp/taesd_copy.safetensors"
    rc=$?
    expect vae_copy_at_other_path_trains $(( rc != 0 || $(grep -c "^done: $tmp/vcopy at step 5" "$tmp/vcopy.log") != 1 ||
        $(ls "$tmp/vcopy/samples" 2> /dev/null | wc -l) == 0 )) \
        "status $rc: $(grep -m1 -E '^(framechain:|done:)' "$tmp/vcopy.log" | cut -c1-200); previews: $(ls "$tmp/vcopy/samples" 2> /dev/null | wc -l)"
    vae_ranks "$tmp/vother" "$tmp/ae/taesd.safetensors" "$tmp/ae/taesd_f16.safetensors"
    rc=$?
    vae_ranks "$tmp/vgone" "$tmp/ae/taesd.safetensors" "$tmp/no_such_vae.safetensors"
    rc2=$?
    other="^framechain: rank 1: --vae $tmp/ae/taesd_f16.safetensors is another autoencoder than rank 0's --vae $tmp/ae/taesd.safetensors (sha256 $(sha256sum "$tmp/ae/taesd_f16.safetensors" | cut -c1-64) against sha256 $(sha256sum "$tmp/ae/taesd.safetensors" | cut -c1-64)): every rank of a run"
    gone="^framechain: rank 1: $tmp/no_such_vae.safetensors: cannot open: .*rank 0 reads its --vae $tmp/ae/taesd.safetensors)$"
    expect vae_other_file_refused $(( rc == 0 || rc2 == 0 || $(grep -c '^framechain' "$tmp/vother.log") != 1 ||
        $(grep -c "$other" "$tmp/vother.log") != 1 || $(grep -c '^framechain' "$tmp/vgone.log") != 1 ||
        $(grep -c "$gone" "$tmp/vgone.log") != 1 )) \
        "status $rc: $(grep -m1 '^framechain' "$tmp/vother.log" | cut -c1-220); a file rank 1 lacks: status $rc2: $(grep -m1 '^framechain' "$tmp/vgone.log" | cut -c1-160)"
    expect vae_other_file_nothing_made $([ ! -e "$tmp/vother" ] && [ ! -e "$tmp/vgone" ]; echo $?) \
        "the run folders: $(ls -d "$tmp/vother" "$tmp/vgone" 2> /dev/null | tr '\n' ' ')"
else
    fail vae_files_for_ranks "tools/autoencoder_reference.py --make: $(tail -1 "$tmp/ae.log")"
fi

# ---- ZeRO-1 against every rank keeping the whole state: the same tensors in every checkpoint ----
train_on 2 "$tmp/replicated" --set shard_optimizer=0 > "$tmp/replicated.log" 2>&1
same=0 n=0
for f in "$tmp/two"/ckpt-*.safetensors; do
    n=$((n + 1))
    [ "$(ckpt_tensors "$f")" = "$(ckpt_tensors "$tmp/replicated/${f##*/}")" ] && same=$((same + 1))
done
expect zero1_same_bytes_as_replicated $(( n == 0 || same != n )) \
    "$same of $n checkpoints with the same tensors (weights, EMA, 8-bit moments), byte for byte, with and without ZeRO-1"

# ---- the sums started block by block during the backward (overlap_grads = 1, the default) against one
# sum after it: the same sums (a + b on two ranks), so the same tensors in every checkpoint ----
train_on 2 "$tmp/after" --set overlap_grads=0 > "$tmp/after.log" 2>&1
rc=$?
same=0 n=0
for f in "$tmp/two"/ckpt-*.safetensors; do
    n=$((n + 1))
    [ "$(ckpt_tensors "$f")" = "$(ckpt_tensors "$tmp/after/${f##*/}")" ] && same=$((same + 1))
done
expect overlapped_sums_same_bytes $(( rc != 0 || n == 0 || same != n ||
    $(grep -c '^ranks: 2, .*by MPI, block by block during the backward' "$tmp/two.log") != 1 ||
    $(grep -c '^ranks: 2, .*by MPI, after the backward' "$tmp/after.log") != 1 )) \
    "status $rc; $same of $n checkpoints with the same tensors, byte for byte, the sums overlapped with the backward and after it; $(grep -m1 '^ranks:' "$tmp/two.log" | cut -d';' -f2)"
# Previews gather the EMA's parts into the weights and put the weights back: nothing the run computes changes.
train_on 2 "$tmp/previews" --set sample_every=10 > "$tmp/previews.log" 2>&1
rc=$?
[ "$(ckpt_tensors "$(final "$tmp/two")")" = "$(ckpt_tensors "$(final "$tmp/previews")")" ]
expect zero1_previews_change_nothing $(( rc != 0 || $? != 0 || $(ls "$tmp/previews/samples" 2> /dev/null | wc -l) < 2 )) \
    "status $rc, $(ls "$tmp/previews/samples" 2> /dev/null | wc -l) previews; the final checkpoint's tensors equal those of the run without previews"
# The previews of 2 ranks are those of one: every window shown is sampled (a rank holds half the batch),
# with the draws of one batch. (The same run folder's path: the image's title names it.)
mv "$tmp/previews" "$tmp/previews_two"
train_on 0 "$tmp/previews" --set sample_every=10 > "$tmp/previews_one.log" 2>&1
rc=$?
same=0
for f in "$tmp/previews_two/samples/"*.png; do cmp -s "$f" "$tmp/previews/samples/${f##*/}" && same=$((same + 1)); done
expect previews_same_on_two_ranks $(( rc != 0 || same < 1 || same != $(ls "$tmp/previews_two/samples/"*.png | wc -l) )) \
    "status $rc; $same of $(ls "$tmp/previews_two/samples/"*.png | wc -l) preview images of 2 ranks the same bytes as one rank's"

# One rank summing over itself (the hook tools/gpu_check.sh runs NCCL's path with on one GPU): the
# same bytes as one rank without it.
FRAMECHAIN_TEST_COLLECTIVES_ALONE=1 train_on 0 "$tmp/alone" > "$tmp/alone.log" 2>&1
cmp -s "$(final "$tmp/one")" "$(final "$tmp/alone")"
expect one_rank_summing_alone_same_bytes $(( $? != 0 || $(grep -c '^ranks: 1, 2 windows .*block by block during the backward' "$tmp/alone.log") != 1 )) \
    "$(grep -m1 '^ranks:' "$tmp/alone.log" | cut -d';' -f1); the final checkpoint equals one rank's without the sums, byte for byte"

train_on 1 "$tmp/mpi1" > "$tmp/mpi1.log" 2>&1
cmp -s "$(final "$tmp/one")" "$(final "$tmp/mpi1")"
expect one_rank_under_mpirun_as_without $? "mpirun -np 1: the final checkpoint equals framechain's alone, byte for byte"

# ---- on footage, every draw of the loader and of the objective: crops, 2x clips, dropped context ----
"$FC" prepare --input "$SAMPLES/vtest.avi" --out "$tmp/data" --size 32 --clip-frames 50 \
    > "$tmp/prep.log" 2>&1 || fail prepare_for_ranks "$(tail -1 "$tmp/prep.log")"
# a plan longer than the dataset's clips (the extrapolate model's 25 frames, clips of 24) is said once,
# before any memory plan (it was found by each rank's loader, after the plan: two lines)
"$FC" prepare --input "$SAMPLES/vtest.avi" --out "$tmp/short24" --size 32 --clip-frames 24 > /dev/null 2>&1
mpirun -np 2 "$FC" --threads 1 train --config configs/tiny/extrapolate.conf --run "$tmp/span_run" --data "$tmp/short24" \
    --steps 2 > "$tmp/span.log" 2>&1
rc=$?
expect plan_longer_than_clips_said_once $(( rc == 0 || $(grep -c '^framechain' "$tmp/span.log") != 1 ||
    $(grep -c "^framechain: $tmp/short24: the plan spans 25 frames" "$tmp/span.log") != 1 ||
    $(grep -c 'memory' "$tmp/span.log") != 0 )) \
    "2 ranks: status $rc; $(grep -c '^framechain' "$tmp/span.log") lines from framechain: $(grep -m1 '^framechain' "$tmp/span.log" | cut -c1-120)"
[ ! -e "$tmp/span_run" ]
expect plan_longer_than_clips_nothing_made $? "the run folder: $([ -e "$tmp/span_run" ] && echo left || echo not made)"
DSETS=(--data "$tmp/data" --set batch_size=4 --set steps=8 --set warmup_steps=2 --set crop_zoom=1.5 --set fast_fraction=0.5
       --set cond_drop=0.3 --set ref_noise=0.02 --set mix_shapes=0.25)
# one rank without its copy of the data (a machine that lacks it; here mpirun's MPMD form gives it another
# path): that rank says why, whichever it is, where the ranks' comparison named one as differing
# ("--data = unreadable of ...", and rank 1 where rank 0 lacked it), nothing made
for lacking in 0 1; do
    if [ $lacking = 0 ]; then a=$tmp/no_copy b=$tmp/data; else a=$tmp/data b=$tmp/no_copy; fi
    mpirun -np 1 "$FC" --threads 1 train --config "$TINY" --run "$tmp/nocopy$lacking" --data "$a" --steps 2 : \
        -np 1 "$FC" --threads 1 train --config "$TINY" --run "$tmp/nocopy$lacking" --data "$b" --steps 2 \
        > "$tmp/nocopy$lacking.log" 2>&1
    eval "rc$lacking=\$?"
done
expect rank_without_data_says_why $(( rc0 == 0 || rc1 == 0 ||
    $(grep -c "^framechain: .*$tmp/no_copy: no such folder" "$tmp/nocopy0.log") != 1 ||
    $(grep -c "^framechain: .*$tmp/no_copy: no such folder" "$tmp/nocopy1.log") != 1 ||
    $(cat "$tmp/nocopy0.log" "$tmp/nocopy1.log" | grep -c "unreadable") != 0 )) \
    "status $rc0 and $rc1: $(grep -m1 '^framechain' "$tmp/nocopy0.log" | cut -c1-120); $(grep -m1 '^framechain' "$tmp/nocopy1.log" | cut -c1-120)"
[ ! -e "$tmp/nocopy0" ] && [ ! -e "$tmp/nocopy1" ]
expect rank_without_data_nothing_made $? "the run folders: $(ls -d "$tmp"/nocopy? 2> /dev/null | tr '\n' ' ')"
# one rank given no --data at all: the comparison names it (the check of the data folders above is a
# collective every rank joins, with --data or without: a rank that skipped it left the others waiting)
timeout 120 mpirun -np 1 "$FC" --threads 1 train --config "$TINY" --run "$tmp/nodata_rank" --data "$tmp/data" --steps 2 : \
    -np 1 "$FC" --threads 1 train --config "$TINY" --run "$tmp/nodata_rank" --steps 2 > "$tmp/nodata_rank.log" 2>&1
rc=$?
expect rank_with_no_data_option_named $(( rc == 0 || rc == 124 ||
    $(grep -c "^framechain: rank 1: '--data = the built-in moving shapes' where rank 0 has '--data = crc32" "$tmp/nodata_rank.log") != 1 )) \
    "status $rc$([ $rc = 124 ] && echo ': hung, killed after 120 s'): $(grep -m1 '^framechain' "$tmp/nodata_rank.log" | cut -c1-150)"
for n in 0 2 4; do
    if [ $n -eq 0 ]; then
        "$FC" --threads 1 train --config configs/tiny/extrapolate.conf --run "$tmp/d$n" "${DSETS[@]}" > "$tmp/d$n.log" 2>&1
    else
        mpirun -np $n "$FC" --threads 1 train --config configs/tiny/extrapolate.conf --run "$tmp/d$n" "${DSETS[@]}" \
            > "$tmp/d$n.log" 2>&1
    fi
done
check footage_two_ranks_same_losses "$tmp/d0" "$tmp/d2" --steps 1-8
check footage_four_ranks_same_losses "$tmp/d0" "$tmp/d4" --steps 1-8 --params-step 8 --layout
# each machine may hold its own copy of the dataset (and exclude list) at a path of its own: the ranks
# compare their contents' CRCs, not the paths (mpirun's MPMD form gives rank 1 another path)
cp -r "$tmp/data" "$tmp/data_copy"
printf 'shard-00000.safetensors 0\n' > "$tmp/ex_a.txt" && cp "$tmp/ex_a.txt" "$tmp/ex_b.txt"
mpirun -np 1 "$FC" --threads 1 train --config configs/tiny/extrapolate.conf --run "$tmp/d2copy" "${DSETS[@]}" \
    --set exclude="$tmp/ex_a.txt" : -np 1 "$FC" --threads 1 train --config configs/tiny/extrapolate.conf \
    --run "$tmp/d2copy" --data "$tmp/data_copy" "${DSETS[@]:2}" --set exclude="$tmp/ex_b.txt" > "$tmp/d2copy.log" 2>&1
rc=$?
printf 'shard-00000.safetensors 1\n' > "$tmp/ex_c.txt"
mpirun -np 1 "$FC" --threads 1 train --config configs/tiny/extrapolate.conf --run "$tmp/d2other" "${DSETS[@]}" \
    --set exclude="$tmp/ex_a.txt" : -np 1 "$FC" --threads 1 train --config configs/tiny/extrapolate.conf \
    --run "$tmp/d2other" --data "$tmp/data_copy" "${DSETS[@]:2}" --set exclude="$tmp/ex_c.txt" > "$tmp/d2other.log" 2>&1
rc2=$?
expect data_copies_at_other_paths_train $(( rc != 0 || rc2 == 0 ||
    $(grep -c "^framechain: rank 1: '--data = crc32 [0-9a-f]*; excluding crc32 [0-9a-f]*' where rank 0 has" "$tmp/d2other.log") != 1 )) \
    "status $rc: $(grep -m1 '^framechain' "$tmp/d2copy.log" | cut -c1-200); another exclude list: status $rc2: $(grep -m1 '^framechain' "$tmp/d2other.log" | cut -c1-200)"
# A damaged clip (one byte in the middle of the shard inverted): the end's count is the run's, said
# once, the line of one rank (each rank counts only the windows it made)
cp -r "$tmp/data" "$tmp/dmg"
"$PYTHON" -c 'import sys; f = open(sys.argv[1], "r+b"); f.seek(f.seek(0, 2) // 2); b = f.read(1); f.seek(-1, 1); f.write(bytes([b[0] ^ 255]))' \
    "$tmp/dmg/shard-00000.safetensors"
DMG=(--data "$tmp/dmg" --set steps=30 --set warmup_steps=2)
"$FC" --threads 1 train --config "$TINY" --run "$tmp/dmg1" "${DMG[@]}" > "$tmp/dmg1.log" 2> "$tmp/dmg1.err"
rc1=$?
mpirun -np 2 "$FC" --threads 1 train --config "$TINY" --run "$tmp/dmg2" "${DMG[@]}" > "$tmp/dmg2.log" 2> "$tmp/dmg2.err"
rc2=$?
one=$(grep 'damaged clips* skipped: ' "$tmp/dmg1.err")
expect damaged_clips_counted_once_for_ranks $(( rc1 != 0 || rc2 != 0 || ${#one} == 0 ||
    $(grep -c 'damaged clips* skipped: ' "$tmp/dmg2.err") != 1 || $(grep -cxF "$one" "$tmp/dmg2.err") != 1 )) \
    "status $rc1 on one rank, $rc2 on two; one rank: ${one:-no count}; two ranks: $(grep -o '[0-9]* damaged clips* skipped: [0-9]* windows*' "$tmp/dmg2.err" | tr '\n' ';')"
# each rank that meets the damaged clip names it, and says which rank it is (one rank: as without MPI)
named1=$(grep -c 'skipped: its windows show the next good clip' "$tmp/dmg1.err")
named2=$(grep -c 'skipped: its windows show the next good clip' "$tmp/dmg2.err")
ranked2=$(grep -c '^framechain: warning: rank [01]: .*dmg/shard-00000.safetensors: .*skipped: its windows show the next good clip' "$tmp/dmg2.err")
expect damaged_clip_named_with_its_rank $(( named1 == 0 || named2 == 0 || ranked2 != named2 ||
    $(grep -c '^framechain: warning: rank' "$tmp/dmg1.err") != 0 )) \
    "one rank: $named1 line(s) naming the clip, $(grep -c '^framechain: warning: rank' "$tmp/dmg1.err") with a rank; two ranks: $ranked2 of $named2 with theirs: $(grep -m1 'skipped: its windows' "$tmp/dmg2.err" | cut -c1-160)"

# ---- checkpoints resume on any number of ranks ----
keep_to "$tmp/two" 10 "$tmp/two_two"
train_on 2 "$tmp/two_two" > "$tmp/two_two.log" 2>&1
cmp -s "$(final "$tmp/two")" "$(final "$tmp/two_two")"
expect resume_two_on_two_bit_exact $? "resumed from step $(sed -n 's/^resuming .* from step \([0-9]*\) .*/\1/p' "$tmp/two_two.log"): the final checkpoint equals the uninterrupted 2-rank run's, byte for byte"
keep_to "$tmp/two" 10 "$tmp/two_one"
train_on 0 "$tmp/two_one" > "$tmp/two_one.log" 2>&1
check resume_two_on_one "$tmp/two" "$tmp/two_one" --steps 1-20 --params-step 20
keep_to "$tmp/one" 10 "$tmp/one_two"
train_on 2 "$tmp/one_two" > "$tmp/one_two.log" 2>&1
check resume_one_on_two "$tmp/one" "$tmp/one_two" --steps 1-20 --params-step 20

# ---- SIGTERM to mpirun: it passes it on; the ranks stop at one step after its checkpoint ----
# (OpenMPI 4.1 passes SIGTERM on only after odls_base_sigkill_timeout seconds and sends SIGKILL as
# long after that, 1 s unless told: the run must last beyond the first wait, and a loaded machine's
# step and checkpoint can take longer than the second; docs/distributed.md)
(export OMPI_MCA_odls_base_sigkill_timeout=10; exec mpirun -np 2 "$FC" --threads 1 train --config "$TINY" --run "$tmp/term" --steps 1000000 --set checkpoint_every=1000) \
    > "$tmp/term.log" 2>&1 &
pid=$!
wait_until 60 $pid trained_past "$tmp/term" "$tmp/term.log" 5
kill -TERM $pid 2> /dev/null
wait $pid 2> /dev/null
rc=$?
stopped=$(sed -n 's/^stopped by SIGTERM at step \([0-9]*\); the checkpoint is written.*/\1/p' "$tmp/term.log")
whole=1
[ -n "$stopped" ] && "$FC" inspect "$(final "$tmp/term" "$stopped")" > /dev/null 2>&1 && whole=0
expect sigterm_mpirun_checkpoint $(( rc == 0 || whole != 0 || $(grep -c '^signals:' "$tmp/term.log") != 0 )) \
    "mpirun status $rc; stopped at step ${stopped:-none}, its checkpoint $([ $whole -eq 0 ] && echo whole || echo missing or damaged); no note on SIGTERM's grace when it is given: $(grep -c '^signals:' "$tmp/term.log") lines${waited:+; $waited}"

# ---- a NaN loss: every rank sees it; rank 0 says it once and keeps the last good checkpoint ----
FRAMECHAIN_TEST_NAN_AT_STEP=7 train_on 2 "$tmp/nan" > "$tmp/nan.log" 2>&1
rc=$?
said=$(grep -c 'the loss is NaN at step 7: stopping; the last good checkpoint, .*ckpt-00000005.safetensors, is kept' "$tmp/nan.log")
"$FC" inspect "$tmp/nan/ckpt-00000005.safetensors" > "$tmp/nan_inspect.log" 2>&1
expect nan_loss_two_ranks $(( rc == 0 || said != 1 || $? != 0 )) \
    "status $rc; $said line naming the kept checkpoint: $(grep -m1 'loss is NaN' "$tmp/nan.log" | cut -c1-120)"

# ---- kill -9 of one rank, ten times, at points chosen by the run's progress ----
# Kill k (0..9) lands on rank k % 2 once the restarted job has made a step of its own and reached
# step 4 + 4k (checkpoints every 4 of 60 steps); mpirun then ends the other rank. Each kill must land
# (the job fails), and the run must still reach its end with the uninterrupted run's bytes. Checkpoint
# writes held 50 ms (each waiting for the last) keep the job going past the last kill's step.
SETS=(--set steps=60 --set checkpoint_every=4 --set keep_checkpoints=3 --set warmup_steps=5 --set lr=1e-3)
train_on 2 "$tmp/ref" > "$tmp/ref.log" 2>&1
rank_pid() {  # rank_pid MPIRUN_PID RANK: the pid of that rank, a child of mpirun
    local p
    for p in $(pgrep -P "$1"); do
        tr '\0' '\n' < "/proc/$p/environ" 2> /dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && echo "$p" && return
    done
}
kills=0 starts=0 why=""
export FRAMECHAIN_TEST_WRITE_DELAY_MS=50
while :; do
    starts=$((starts + 1))
    (exec mpirun -np 2 "$FC" --threads 1 train --config "$TINY" --run "$tmp/kill" "${SETS[@]}") > "$tmp/kill.log" 2>&1 &
    pid=$!
    if [ $kills -lt 10 ]; then
        wait_until 60 $pid trained_past "$tmp/kill" "$tmp/kill.log" $((4 + 4 * kills))
        victim=$(rank_pid $pid $((kills % 2)))
        [ -n "$waited" ] && why="; start $starts: $waited"
        [ -z "$victim" ] && [ -z "$why" ] && why="; start $starts: no rank $((kills % 2)) under mpirun $pid"
        [ -n "$victim" ] && kill -9 "$victim" 2> /dev/null
    fi
    wait $pid 2> /dev/null
    rc=$?
    [ $rc -ne 0 ] && [ $kills -lt 10 ] && [ -z "$why" ] || break
    kills=$((kills + 1))
done
unset FRAMECHAIN_TEST_WRITE_DELAY_MS
resumed=$(sed -n 's/^resuming .* from step \([0-9]*\) .*/\1/p' "$tmp/kill.log")
expect kill9_one_rank_runs_finish $(( rc != 0 || kills < 10 || ${resumed:-0} == 0 )) \
    "$kills kills of one rank with kill -9, $starts starts, status $rc, the last resumed from step ${resumed:-none}$why"
cmp -s "$(final "$tmp/ref" 60)" "$(final "$tmp/kill" 60)"
expect kill9_one_rank_final_checkpoint_identical $? "the final checkpoint equals the uninterrupted 2-rank run's, byte for byte"

# ---- the GPU ranks' path on the CUDA emulation: gradients and weights through host memory ----
if [ -n "$EMU" ] && [ -x "$EMU" ] && "$EMU" --version | grep -q '^  MPI'; then
    ESETS=(--config "$TINY" --steps 4 --set warmup_steps=2 --set checkpoint_every=2 --set keep_checkpoints=5)
    "$EMU" --threads 1 --device cuda-fp32 train "${ESETS[@]}" --run "$tmp/e1" > "$tmp/e1.log" 2>&1
    rc1=$?
    mpirun -np 2 "$EMU" --threads 1 --device cuda-fp32 train "${ESETS[@]}" --run "$tmp/e2" > "$tmp/e2.log" 2>&1
    rc2=$?
    expect emulated_gpu_two_ranks_train $(( rc1 != 0 || rc2 != 0 || $(grep -c '^ranks: 2, .*by MPI through host memory (the CUDA emulation has no NCCL)' "$tmp/e2.log") != 1 )) \
        "status $rc1 on one rank, $rc2 on two: $(grep -m1 '^ranks:' "$tmp/e2.log")"
    # the host copy those sums go through is in the plan (n_params fp32 values; it was in none)
    params=$(sed -n 's/^memory plan (.*, \([0-9]*\) parameters):$/\1/p' "$tmp/e2.log" | head -1)
    kib=$(sed -n 's/^  MPI gradients *\([0-9.]*\) KiB$/\1/p' "$tmp/e2.log")
    expect emulated_gpu_mpi_gradients_planned $(awk -v p="${params:-0}" -v k="${kib:-0}" 'BEGIN { d = k - 4 * p / 1024; exit !(p > 0 && d * d < 0.01) }'; echo $?) \
        "$params parameters; the plan's MPI gradients: ${kib:-no such line} KiB"
    check emulated_gpu_two_ranks_same_losses_weights "$tmp/e1" "$tmp/e2" --steps 1-4 --params-step 4 --layout
    mpirun -np 2 "$EMU" --threads 1 --device cuda train "${ESETS[@]}" --run "$tmp/ebf" > "$tmp/ebf.log" 2>&1
    mpirun -np 2 "$EMU" --threads 1 --device cuda train "${ESETS[@]}" --run "$tmp/ebf0" --set shard_optimizer=0 \
        > "$tmp/ebf0.log" 2>&1
    [ "$(ckpt_tensors "$(final "$tmp/ebf" 4)")" = "$(ckpt_tensors "$(final "$tmp/ebf0" 4)")" ]
    expect emulated_gpu_zero1_same_bytes $? "bf16 on the emulated GPU, 2 ranks: the final tensors with and without ZeRO-1 the same"
    mpirun -np 2 "$EMU" --threads 1 --device cuda-fp32 train "${ESETS[@]}" --run "$tmp/e2after" --set overlap_grads=0 \
        > "$tmp/e2after.log" 2>&1
    [ "$(ckpt_tensors "$(final "$tmp/e2" 4)")" = "$(ckpt_tensors "$(final "$tmp/e2after" 4)")" ]
    expect emulated_gpu_overlapped_sums_same_bytes $? "2 ranks on the emulated GPU: the final tensors with the sums during the backward (each block's gradients downloaded as it is made) and after it the same"
    FRAMECHAIN_TEST_COLLECTIVES_ALONE=1 "$EMU" --threads 1 --device cuda-fp32 train "${ESETS[@]}" --run "$tmp/e1alone" \
        > "$tmp/e1alone.log" 2>&1
    cmp -s "$(final "$tmp/e1" 4)" "$(final "$tmp/e1alone" 4)"
    expect emulated_gpu_one_rank_summing_alone_same_bytes $? "one rank on the emulated GPU summing over itself (each block's gradients through host memory): the final checkpoint equals the plain run's, byte for byte"
    mpirun -np 2 "$EMU" --threads 1 --device cuda-fp32 train "${ESETS[@]}" --run "$tmp/enccl" --set collectives=nccl \
        > "$tmp/enccl.log" 2>&1
    rc=$?
    expect emulated_gpu_nccl_required_refused $(( rc == 0 || $(grep -c 'collectives = nccl, but NCCL cannot sum the gradients here: the CUDA emulation has no NCCL' "$tmp/enccl.log") < 1 )) \
        "status $rc: $(grep -m1 'collectives = nccl' "$tmp/enccl.log" | cut -c1-160)"
    expect emulated_gpu_nccl_refused_leaves_nothing $([ ! -e "$tmp/enccl" ]; echo $?) "no run folder left (it was made for this run)"
    # NCCL starts only for a run with steps to do: a finished run says so, whatever collectives asks
    FRAMECHAIN_TEST_COLLECTIVES_ALONE=1 "$EMU" --threads 1 --device cuda-fp32 train "${ESETS[@]}" --run "$tmp/e1" \
        --set collectives=nccl > "$tmp/e1done.log" 2>&1
    rc=$?
    expect emulated_gpu_finished_run_starts_no_nccl $(( rc != 0 || $(grep -c 'nothing to do' "$tmp/e1done.log") != 1 )) \
        "status $rc: $(tail -1 "$tmp/e1done.log" | cut -c1-160)"
    # ranks started on different devices (mpirun -np 1 A --device cpu : -np 1 A --device cuda): each
    # rank's gradients of other arithmetic, one run recorded as rank 0's; refused by the rank that
    # differs, naming the device, nothing made
    mpirun -np 1 "$EMU" --threads 1 --device cpu train "${ESETS[@]}" --run "$tmp/emix" : \
        -np 1 "$EMU" --threads 1 --device cuda train "${ESETS[@]}" --run "$tmp/emix" > "$tmp/emix.log" 2>&1
    rc=$?
    expect ranks_on_other_devices_refused $(( rc == 0 || $(grep -c "^framechain: rank 1: '--device = cuda (bf16)' where rank 0 has '--device = cpu (fp32)'" "$tmp/emix.log") != 1 )) \
        "status $rc: $(grep -m1 '^framechain' "$tmp/emix.log" | cut -c1-160); run folder $([ -e "$tmp/emix" ] && echo left || echo not made)"
    expect ranks_on_other_devices_nothing_made $([ ! -e "$tmp/emix" ]; echo $?) "the run folder: $(ls -A "$tmp/emix" 2>&1 | tr '\n' ' ')"
    keep_to "$tmp/ebf" 2 "$tmp/ebf_again"
    mpirun -np 2 "$EMU" --threads 1 --device cuda train "${ESETS[@]}" --run "$tmp/ebf_again" > "$tmp/ebf_again.log" 2>&1
    cmp -s "$(final "$tmp/ebf" 4)" "$(final "$tmp/ebf_again" 4)"
    expect emulated_gpu_resume_bit_exact $? "2 ranks on the emulated GPU, resumed from step 2: the final checkpoint byte for byte"
fi

# ---- a batch the ranks cannot share ----
mpirun -np 3 "$FC" --threads 1 train --config "$TINY" --run "$tmp/three" > "$tmp/three.log" 2>&1
rc=$?
expect batch_not_shared_evenly_refused $(( rc == 0 || $(grep -c '^framechain' "$tmp/three.log") != 1 ||
    $(grep -c '^framechain: batch_size = 2: 3 ranks cannot share it evenly' "$tmp/three.log") != 1 )) \
    "status $rc, said once: $(grep -c '^framechain' "$tmp/three.log") lines from framechain: $(grep -m1 'cannot share' "$tmp/three.log")"
expect batch_refused_writes_nothing $([ ! -e "$tmp/three" ]; echo $?) "no run folder made"
exit 0
