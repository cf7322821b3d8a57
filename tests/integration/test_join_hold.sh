#!/bin/bash
# --join_hold: the bound of an elastic job's hold for the workers' save at
# a join (docs/usage.md, docs/checkpoint.md "Elastic jobs"): its bounds in
# msrun, its environment variable and `msrun coordinator` alike, and the
# embedded coordinator started with it. Also the CPU line of --version
# and of train_gpt's start-up (rank 0 only).
. "$(dirname "$0")/lib.sh"
use_token_file

# parses CMD ARGS...: "accepted" when the options parsed (the command then
# stops at the missing program or token), else the error line
verdict() {
    local code=0
    timeout -k 5 20 env -u MSRUN_TOKEN -u MSRUN_TOKEN_FILE MSRUN_TEST_MARKER="$MARKER" "$@" \
        >"$TMP/out" 2>"$TMP/err" || code=$?
    [ "$code" = 2 ] || fail "$*: exit status $code, not 2"
    if grep -q "no-such-program-xyz' not found\|no job token" "$TMP/err"; then
        echo accepted
    else
        cat "$TMP/err"
    fi
}
agent=(--local_worker_num=1 --master_addr=127.0.0.1)
# 0 (no hold) and 1e9 s are its bounds; one millisecond outside is refused
for v in 0 1000000000; do
    out=$(verdict "$MSRUN" --join_hold="$v" "${agent[@]}" no-such-program-xyz)
    [ "$out" = accepted ] || fail "msrun --join_hold=$v: $out"
    out=$(verdict "$MSRUN" coordinator --join_hold="$v")
    [ "$out" = accepted ] || fail "msrun coordinator --join_hold=$v: $out"
    out=$(verdict env MSRUN_JOIN_HOLD="$v" "$MSRUN" "${agent[@]}" no-such-program-xyz)
    [ "$out" = accepted ] || fail "MSRUN_JOIN_HOLD=$v: $out"
done
# one past each bound is told that bound; no number, that it is none
for v in -0.001 1000000000.001 soon; do
    case "$v" in
    -*) why="$v: must be at least 0 s" ;;
    1*) why="$v: must be at most 1000000000 s" ;;
    *) why="$v is not a number of seconds" ;;
    esac
    out=$(verdict "$MSRUN" --join_hold="$v" "${agent[@]}" no-such-program-xyz)
    case "$out" in "msrun: error: --join_hold=$why"*) ;;
    *) fail "msrun --join_hold=$v: $out" ;; esac
    out=$(verdict "$MSRUN" coordinator --join_hold="$v")
    case "$out" in "msrun coordinator: error: --join_hold=$why"*) ;;
    *) fail "msrun coordinator --join_hold=$v: $out" ;; esac
    out=$(verdict env MSRUN_JOIN_HOLD="$v" "$MSRUN" "${agent[@]}" no-such-program-xyz)
    case "$out" in *"MSRUN_JOIN_HOLD=$why"*) ;;
    *) fail "MSRUN_JOIN_HOLD=$v: $out" ;; esac
done
ok "--join_hold: 0 and 1e9 s accepted, -0.001 and 1e9 + 0.001 s refused"

# the embedded coordinator of an elastic job gets the value; without the
# option it gets none (its default: --cluster_time_out)
printf '#!/bin/sh\ntouch "%s/started"\nexec sleep 30\n' "$TMP" >"$TMP/prog.sh"
chmod +x "$TMP/prog.sh"
for hold in 7.5 none; do
    rm -f "$TMP/started"
    port=$(free_port)
    extra=()
    [ "$hold" = none ] || extra=(--join_hold="$hold")
    start_msrun --master_addr=127.0.0.1 --master_port="$port" --nnodes=1:2 --log_level=debug \
        --local_worker_num=1 --last_call=0.1 "${extra[@]}" "$TMP/prog.sh"
    for ((i = 0; i < 600; i++)); do # 30 s at most
        [ -e "$TMP/started" ] && break
        sleep 0.05
    done
    [ -e "$TMP/started" ] || fail "join_hold $hold: the worker did not start"
    # its whole command line, from msrun's debug log (a copy of msrun shows
    # only as much of it as msrun's own command line has room for)
    coordinator_of "--bind" "$BG_PID" >/dev/null || fail "join_hold $hold: no coordinator"
    args="$(sed -n 's/.*starting the embedded coordinator: //p' "$TMP/err") "
    if [ "$hold" = none ]; then
        case "$args" in *--join_hold*) fail "no --join_hold given, yet passed: $args" ;; esac
    else
        case "$args" in *"--join_hold 7.500 "* | *"--join_hold 7.500") ;;
        *) fail "--join_hold=7.5 not passed on: $args" ;; esac
    fi
    kill -TERM "$BG_PID"
    wait_pid "$BG_PID" 20
    no_leftovers "join_hold $hold"
done
ok "the embedded coordinator gets --join_hold when given"

# --version names the CPU's features (base/cpu_features.h), masks included
CODE=0
MSRUN_CPU_DISABLE=f16c "$MSRUN" --version >"$TMP/out" 2>&1 || CODE=$?
expect_code 0 "msrun --version"
expect_in "^msrun [0-9]" "$TMP/out" "msrun --version"
expect_in "^cpu: .*masked off: f16c" "$TMP/out" "msrun --version's CPU line"
ok "msrun --version names the CPU's features"

gpt=("$BUILD/bin/train_gpt" --layers 1 --channels 16 --heads 2 --seq 8 --micro-batch 1
    --steps 1 --threads 1)
CODE=0
MSRUN_CPU_DISABLE=f16c timeout -k 5 30 "${gpt[@]}" >"$TMP/out" 2>"$TMP/err" || CODE=$?
expect_code 0 "train_gpt alone"
expect_in "^train_gpt: cpu: .*masked off: f16c" "$TMP/err" "train_gpt's CPU line"
run_msrun --worker_num=2 --local_worker_num=2 "${gpt[@]}"
expect_code 0 "train_gpt on 2 ranks"
n=$(grep -c "train_gpt: cpu: " "$TMP/err")
[ "$n" = 1 ] || fail "train_gpt on 2 ranks: $n CPU lines, want 1 (rank 0's)"
no_leftovers "train_gpt on 2 ranks"
ok "train_gpt's start-up names the CPU's features, on rank 0"
exit $FAILED
