# tools/checks.sh: the checks the tools' scripts share (sourced, not run): a count, the settings of runs.

# positive_whole SCRIPT NAME=VALUE ...: each VALUE a whole number from 1 up, else one line naming the
# setting and exit status 2: said before the script's work, not after minutes of it (a typo in
# PAIRS or DEMO_STEPS once ran the whole script and failed at its end, or hung).
positive_whole() {
    local script=$1 v
    shift
    for v in "$@"; do
        case ${v#*=} in
            '' | *[!0-9]* | 0*) echo "$script: $v: a whole number from 1 up is needed" >&2; exit 2 ;;
        esac
    done
}

# trained_as SCRIPT WORK MARK WANT: the three models under WORK (starter, extrapolate, interpolate)
# were trained with the settings in WORK/MARK (written there once they are); a run asking for others
# (WANT) would meet train's refusal of their checkpoints after its data, so it is refused now, in one
# line with status 1. Nothing is said where no model has a checkpoint or MARK holds no settings yet.
trained_as() {
    local script=$1 work=$2 mark=$3 want=$4 had role trained=0
    had=$(cat "$work/$mark" 2> /dev/null) || had=""
    for role in starter extrapolate interpolate; do compgen -G "$work/$role/ckpt-*.safetensors" > /dev/null && trained=1; done
    if [ -n "$had" ] && [ "$had" != "$want" ] && [ $trained = 1 ]; then
        echo "$script: the models under $work were trained with $had; this run asks for $want: give another work folder, or remove $work/starter, $work/extrapolate and $work/interpolate to train them again" >&2
        exit 1
    fi
}
