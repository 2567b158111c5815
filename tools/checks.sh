# tools/checks.sh: the checks of a setting that the tools' scripts share (sourced, not run).

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
