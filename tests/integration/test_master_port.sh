#!/usr/bin/env bash
# A standalone job given --master_port (or MSRUN_MASTER_PORT) runs its
# embedded coordinator there, as the user asked, instead of on a free port;
# a port already taken is reported, exit 2.
. "$(dirname "$0")/lib.sh"

port=$(free_port)
start_msrun --worker_num=1 --local_worker_num=1 --master_port="$port" "$WORKER" sleep 20
wait_for "ready" "$TMP/out" 20 || fail "the worker did not start"
coord=$(pgrep -P "$BG_PID" -f "msrun coordinator" | head -n 1)
[ -n "$coord" ] || fail "no embedded coordinator"
tr '\0' ' ' <"/proc/$coord/cmdline" | grep -q -- "--bind 127.0.0.1:$port " ||
    fail "the coordinator does not listen on --master_port $port: $(tr '\0' ' ' <"/proc/$coord/cmdline")"
ok "--master_port without --master_addr is the embedded coordinator's port"

# the same port again while the first job holds it
run_msrun --worker_num=1 --local_worker_num=1 --master_port="$port" "$WORKER" sleep 1
expect_code 2 "a taken --master_port"
expect_in "cannot start the coordinator on 127.0.0.1:$port" "$TMP/err" "a taken port is reported"
ok "a taken --master_port is reported"

kill -TERM "$BG_PID"
wait_pid "$BG_PID" 20
no_leftovers "master_port"
exit $FAILED
