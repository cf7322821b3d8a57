#!/usr/bin/env bash
# The embedded coordinator as msrun starts it: first as a copy of msrun (a
# fork that runs the coordinator's main, no second exec), later (a restart)
# by exec; either way stdin /dev/null, the token never on its command line
# nor a token file's name in its environment, its own process group, and
# nothing of msrun's open files but its ready pipe.
. "$(dirname "$0")/lib.sh"

(umask 077 && echo "spawn-test-token" >"$TMP/token")
start_msrun --worker_num=1 --local_worker_num=1 --log_level=debug --token_file "$TMP/token" \
    "$WORKER" sleep 20
wait_for "ready" "$TMP/out" 20 || fail "the worker did not start"
coord=$(pgrep -P "$BG_PID" -f "msrun coordinator" | head -n 1)
[ -n "$coord" ] || fail "no coordinator child of msrun (pid $BG_PID)"

# a copy of msrun: exec would have named it after the program it loaded
# (/proc/self/exe: "exe"), and the copy says so in msrun's debug log
[ "$(cat "/proc/$coord/comm")" = "$(cat "/proc/$BG_PID/comm")" ] ||
    fail "the coordinator ($(cat "/proc/$coord/comm")) is not a copy of msrun ($(cat "/proc/$BG_PID/comm"))"
grep -q "the embedded coordinator runs in a copy of msrun (pid $coord)" "$TMP/err" ||
    fail "msrun's log does not say the coordinator $coord is its copy"
# its command line reads as an exec'd one's, argument by argument
[ "$(tr '\0' '\n' <"/proc/$coord/cmdline" | sed -n 2,3p | tr '\n' ' ')" = "coordinator --bind " ] ||
    fail "the copy's command line: $(tr '\0' '|' <"/proc/$coord/cmdline")"
ok "the first coordinator is a copy of msrun, not a second exec"

env_of() { tr '\0' '\n' <"/proc/$1/environ"; }
# what the checks below read of a coordinator: stdin, the token's ways
check_child() { # PID WHAT [exec]
    [ "$(readlink "/proc/$1/fd/0")" = /dev/null ] ||
        fail "the $2's stdin is $(readlink "/proc/$1/fd/0"), not /dev/null"
    ! env_of "$1" | grep -q "^MSRUN_TOKEN_FILE=" ||
        fail "the $2's environment names the token file"
    ! tr '\0' ' ' <"/proc/$1/cmdline" | grep -q "spawn-test-token" ||
        fail "the token is on the $2's command line"
    # exec: the token in its environment; a copy keeps its environment in
    # its memory, and /proc shows msrun's own (given no token here)
    if [ "${3:-}" = exec ]; then
        env_of "$1" | grep -qx "MSRUN_TOKEN=spawn-test-token" ||
            fail "the $2's environment lacks the job's token"
    else
        ! env_of "$1" | grep -q "spawn-test-token" || fail "the token shows in /proc/$1/environ"
    fi
}
check_child "$coord" coordinator
ok "the coordinator's stdin is /dev/null, the token reaches it in its environment only"

[ "$(ps -o pgid= -p "$coord" | tr -d ' ')" = "$coord" ] ||
    fail "the coordinator does not lead its own process group"
ok "the coordinator leads its own process group"

# msrun's own descriptors (its event loop's, the proxy's socket, the
# workers' pipes, /dev/null) stay in msrun
for fd in /proc/"$coord"/fd/*; do
    target=$(readlink "$fd" 2>/dev/null) || continue
    case "$target" in
    *agent.sock* | *worker_*.log*) fail "the coordinator holds msrun's $target (fd ${fd##*/})" ;;
    esac
done
ok "no msrun descriptor leaked into the coordinator"

# a restart execs msrun, with the same care
kill -9 "$coord"
wait_for "restarted it" "$TMP/err" 20 || fail "the coordinator was not restarted"
coord2=$(pgrep -P "$BG_PID" -f "msrun coordinator" | head -n 1)
[ -n "$coord2" ] && [ "$coord2" != "$coord" ] || fail "no restarted coordinator"
[ "$(cat "/proc/$coord2/comm")" = exe ] || fail "the restarted coordinator was not exec'd"
check_child "$coord2" "restarted coordinator" exec
[ "$(ps -o pgid= -p "$coord2" | tr -d ' ')" = "$coord2" ] ||
    fail "the restarted coordinator does not lead its own process group"
ok "a restarted coordinator is exec'd, stdin /dev/null, the token in its environment only"

kill -TERM "$BG_PID"
wait_pid "$BG_PID" 20
no_leftovers "after SIGTERM"
exit $FAILED
