# Helpers shared by the shell suites, sourced first thing: . "$(dirname "$0")/../lib.sh"
# Sets FC (the framechain binary: the script's first argument, else ./framechain), tmp (a scratch
# folder, removed at exit together with any background job still running) and SAMPLES (Debian's
# opencv-doc sample videos).
FC=${1:-./framechain}
tmp=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
SAMPLES=/usr/share/doc/opencv-doc/examples/data

# as_user: the command prefix that runs a command as another user than root (nobody), for the tests of
# permissions, which root passes whatever the modes: ${as_user[@]+"${as_user[@]}"} CMD... (empty when the
# suite does not run as root: CMD runs as the suite's own user)
as_user=()
[ "$(id -u)" != 0 ] || as_user=(setpriv --reuid=65534 --regid=65534 --clear-groups)

pass() { echo "PASS $1: $2"; }
fail() { echo "FAIL $1: $2"; }
expect() {  # expect NAME STATUS MESSAGE: PASS when STATUS is 0, else FAIL
    if [ "$2" -eq 0 ]; then pass "$1" "$3"; else fail "$1" "$3"; fi
}

# kill9_reap PID: kill -9 the job PID of this shell and wait for it; its exit status is the function's.
# The shell's "Killed" notice of the job goes nowhere: on a loaded machine bash reaps the job before
# `wait` and prints the notice after it, on the suite's stderr, where the runner counts it as an error
# of the suite's own shell code.
kill9_reap() {
    local rc
    exec 3>&2 2> /dev/null
    kill -9 "$1"
    wait "$1"
    rc=$?
    : reaped
    exec 2>&3 3>&-
    return $rc
}

# ---- waiting on progress, never on the clock ----
# wait_until SECONDS PID CMD...: run CMD every 10 ms until it succeeds (status 0), the process PID has
# ended (1) or SECONDS have passed (2). CMD runs in this shell, so it may set variables. `waited` says
# what went wrong ("" on success), for the failure's message.
wait_until() {
    local limit=$1 pid=$2 end=$((SECONDS + $1))
    shift 2
    waited=""
    while ! "$@"; do
        if ! kill -0 "$pid" 2> /dev/null; then
            waited="process $pid ended before: $*"
            return 1
        fi
        if [ $SECONDS -ge $end ]; then
            waited="still not after ${limit} s: $*"
            return 2
        fi
        sleep 0.01
    done
}

# int_while_starting LOG CMD...: CMD started as a script's background job is (SIGINT ignored), held at
# its start by the test hook FRAMECHAIN_TEST_START_DELAY_MS, sent SIGINT there; its output in LOG, its
# status in rc. (A signal to a command that had yet to catch it was lost.)
int_while_starting() {
    local log=$1 pid
    shift
    (trap '' INT; exec env FRAMECHAIN_TEST_START_DELAY_MS=5000 "$@") > "$log" 2>&1 &
    pid=$!
    wait_until 60 $pid grep -q '^test hook: the start held' "$log"
    kill -INT $pid 2> /dev/null
    wait $pid
    rc=$?
}

# trained_past RUN LOG STEP: the trainer whose stdout goes to LOG has made a step of its own (past the
# checkpoint it resumed from), and its metrics have reached STEP. Its "checkpoint staging" line comes
# once metrics.jsonl is cut back to the resumed step: the lines beyond are this process's.
trained_past() {
    grep -q '^checkpoint staging:' "$2" 2> /dev/null || return 1
    local from last
    from=$(sed -n 's/^resuming .* from step \([0-9]*\) .*/\1/p' "$2")
    last=$(sed -n '$s/^{"step":\([0-9]*\),.*/\1/p' "$1/metrics.jsonl" 2> /dev/null)
    [ -n "$last" ] && [ "$last" -gt "${from:-0}" ] && [ "$last" -ge "$3" ]
}

# writing_checkpoint RUN PID: process PID is writing a checkpoint of RUN (its temporary file,
# ckpt-*.safetensors.tmp-PID, is there; a killed process leaves it behind); the file's name in `writing`.
writing_checkpoint() {
    local f=("$1"/ckpt-*.safetensors.tmp-"$2")
    [ -e "${f[0]}" ] && writing=${f[0]##*/}
}

# ckpt_tensors CKPT: a digest of a checkpoint's tensors, its header left out (the header's config names
# keys that change no tensor, such as sample_every)
ckpt_tensors() {  # (a missing file gives a line of its own: two missing files are not the same tensors)
    [ -f "$1" ] || { echo "missing: $1"; return 1; }
    local n
    n=$(od -An -tu8 -N8 "$1" | tr -d ' ')
    tail -c +$((9 + n)) "$1" | md5sum
}

# appears_meanwhile DIR NAME CMD...: CMD (its write held by a test hook in its environment) runs in the
# background; once its temporary file shows in the empty folder DIR (seen twice 0.2 s apart: the probe
# of its start-up checks, made and removed at once, would be a user's file before the start), a user's
# file is put at DIR/NAME, CMD's output name. Status 0 when CMD then stops with status 1 saying so in one of its stderr lines, the
# user's file as it came and nothing else left in DIR; `appeared` says what happened.
appears_meanwhile() {
    local dir=$1 name=$2 pid rc
    shift 2
    mkdir -p "$dir"
    "$@" > /dev/null 2> "$dir.err" &
    pid=$!
    wait_until 60 $pid eval '[ -n "$(ls -A "$dir")" ] && sleep 0.2 && [ -n "$(ls -A "$dir")" ]'
    echo "a user's file" > "$dir/$name"
    wait $pid
    rc=$?
    appeared="status $rc: $(tail -1 "$dir.err" | cut -c1-160); left: $(ls -A "$dir" | tr '\n' ' ')${waited:+ ($waited)}"
    [ $rc = 1 ] && grep -q "$name: appeared while this command ran: not replaced" "$dir.err" &&
        [ "$(cat "$dir/$name")" = "a user's file" ] && [ "$(ls -A "$dir")" = "$name" ]
}

# have PATTERN: a file matches the glob PATTERN
have() { compgen -G "$1" > /dev/null; }

# train_roles NAME STEPS WARMUP [DIR [KEY=VALUE...]]: the three tiny roles trained STEPS steps each
# into DIR/ROLE (default $tmp), one checkpoint at the end, the keys set on each; RUNS names them for
# generate and eval. A failure ends the script.
train_roles() {
    local name=$1 steps=$2 warmup=$3 dir=${4:-$tmp} role kv
    local sets=(--set warmup_steps="$warmup" --set checkpoint_every="$steps")
    for kv in "${@:5}"; do sets+=(--set "$kv"); done
    for role in starter extrapolate interpolate; do
        if ! "$FC" --threads 2 train --config configs/tiny/$role.conf --run "$dir/$role" --steps "$steps" \
            "${sets[@]}" > "$dir/$role.log" 2>&1; then
            fail "${name}_train_$role" "$(tail -1 "$dir/$role.log")"
            exit 1
        fi
    done
    RUNS=(--starter "$dir/starter" --extrapolate "$dir/extrapolate" --interpolate "$dir/interpolate")
}

# flip_byte FILE OFFSET: the byte at OFFSET inverted (xor 0xff), so that it surely changes: a byte
# written over it with a fixed value leaves it as it was where it already held that value (an 8-bit
# optimizer code of 255, say), and the damage a test meant is not there
flip_byte() {
    local b
    b=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' ')
    [ -n "$b" ] || { echo "flip_byte: $1 has no byte at $2" >&2; return 1; }
    printf "\\$(printf '%03o' $((b ^ 255)))" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}

# damage_clip SHARD CLIP: one byte in the middle of clip number CLIP's data in the shard file flipped
# (its CRC then fails: a damaged clip, as a bad disk leaves one)
damage_clip() {
    "${PYTHON:-python3}" - "$1" "$2" <<'PY'
import json, struct, sys
with open(sys.argv[1], "r+b") as f:
    size = struct.unpack("<Q", f.read(8))[0]
    start, end = json.loads(f.read(size))["clip.%d" % int(sys.argv[2])]["data_offsets"]
    f.seek(8 + size + (start + end) // 2)
    b = f.read(1)
    f.seek(-1, 1)
    f.write(bytes([b[0] ^ 0xff]))
PY
}

# out_of_repository NAME PAIRS ENV...: each tools script of PAIRS ("script:folder ..."), copied into
# $tmp/lit/repo/tools beside the stub framechain already there, run from $tmp/lit/cwd with ENV
# (env's arguments) must make out/FOLDER in that repository and leave the folder it ran from empty.
out_of_repository() {
    local name=$1 pairs=$2 ok=1 report="" pair script made held
    shift 2
    for pair in $pairs; do
        script=${pair%%:*} made=${pair#*:}
        cp "tools/$script.sh" tools/checks.sh "$tmp/lit/repo/tools/"
        (cd "$tmp/lit/cwd" && env "$@" timeout 60 "$tmp/lit/repo/tools/$script.sh") > "$tmp/lit/$script.log" 2>&1
        held=$(ls -A "$tmp/lit/cwd" | tr '\n' ' ')
        [ -z "$held" ] && [ -d "$tmp/lit/repo/out/$made" ] || ok=0
        report+="$script: the folder it ran from holds ${held:-nothing}, out/$made $([ -d "$tmp/lit/repo/out/$made" ] || echo "not ")made; "
        rm -rf "$tmp/lit/cwd" "$tmp/lit/repo/out" && mkdir "$tmp/lit/cwd"
    done
    [ $ok = 1 ]
    expect "$name" $? "$report"
}
