# Helpers of the training suites, sourced after lib.sh by a script that sets TINY (the config) and SETS
# (the --set options every run of the script takes).
# Run framechain itself (not a shell function around it) in the background: the signals must reach it.
train() {  # train RUN [extra args...]
    local run=$1
    shift
    exec "$FC" --threads 1 train --config "$TINY" --run "$run" "${SETS[@]}" "$@"
}
bg_train() {  # bg_train LOG RUN [extra args...]: start in the background, $! is framechain's pid
    local log=$1
    shift
    (train "$@") > "$log" 2>&1 &
}
