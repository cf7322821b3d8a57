#!/usr/bin/env bash
# The embedded coordinator as msr_spawn starts it: stdin /dev/null, the
# token in its environment (never a token file's name), its own process
# group, and nothing of msrun's open files but its ready pipe.
. "$(dirname "$0")/lib.sh"

(umask 077 && echo "spawn-test-token" >"$TMP/token")
start_msrun --worker_num=1 --local_worker_num=1 --token_file "$TMP/token" "$WORKER" sleep 20
wait_for "ready" "$TMP/out" 20 || fail "the worker did not start"
coord=$(pgrep -P "$BG_PID" -f "msrun coordinator" | head -n 1)
[ -n "$coord" ] || fail "no coordinator child of msrun (pid $BG_PID)"

[ "$(readlink "/proc/$coord/fd/0")" = /dev/null ] ||
    fail "the coordinator's stdin is $(readlink "/proc/$coord/fd/0"), not /dev/null"
ok "the coordinator's stdin is /dev/null"

env_of() { tr '\0' '\n' <"/proc/$1/environ"; }
env_of "$coord" | grep -qx "MSRUN_TOKEN=spawn-test-token" ||
    fail "the coordinator's environment lacks the job's token"
! env_of "$coord" | grep -q "^MSRUN_TOKEN_FILE=" ||
    fail "the coordinator's environment names the token file"
! tr '\0' ' ' <"/proc/$coord/cmdline" | grep -q "spawn-test-token" ||
    fail "the token is on the coordinator's command line"
ok "the token reaches the coordinator in its environment only"

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

kill -TERM "$BG_PID"
wait_pid "$BG_PID" 20
no_leftovers "after SIGTERM"
exit $FAILED
